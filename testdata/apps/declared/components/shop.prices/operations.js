'use strict'

exports.transit = async (input) => ({ title: input.title, from: 'prices' })
