'use strict'

const isNumber = require('is-number')

exports.transit = async (input) => {
  if (!isNumber(input.amount)) throw new Error('amount must be a number')
  return { title: input.title, amount: Number(input.amount) }
}
