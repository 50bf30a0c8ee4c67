'use strict'

const ms = require('ms')
const { addMilliseconds, formatISO } = require('date-fns')
const { round } = require('lodash')

exports.transit = async (input) => {
  const due = addMilliseconds(new Date(0), ms(input.due || '7d'))
  return { title: input.title, amount: round(Number(input.amount), 2), due: formatISO(due) }
}
