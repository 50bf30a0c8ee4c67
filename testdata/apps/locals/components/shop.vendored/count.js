'use strict'

async function computation () {
  return require('x') + require('y')
}

exports.computation = computation
