module.exports = 2
