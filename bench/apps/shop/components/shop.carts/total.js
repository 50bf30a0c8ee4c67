'use strict'

const ms = require('ms')

exports.total = async (input) => `${input.items.length} items, kept for ${ms(86400000)}`
