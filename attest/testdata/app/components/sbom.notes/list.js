module.exports = () => []
