'use strict'

const { v4: uuid } = require('uuid')
const { format } = require('date-fns')

exports.invoice = async (input) => `${format(new Date(0), 'yyyy-MM-dd')}-${input.amount}-${uuid()}`
