module.exports = 'local'
