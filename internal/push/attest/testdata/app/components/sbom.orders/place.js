module.exports = () => require('ms')('2 days')
