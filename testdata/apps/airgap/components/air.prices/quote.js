'use strict'

// debug depends on ms: the install needs a package's own dependencies from the npm registry too
const debug = require('debug')('air:prices')

exports.quote = async (input) => {
  debug('quote %d', input.amount)
  return (input.amount * 1.2).toFixed(2)
}
