'use strict'

async function computation () {
  return require('ms')(60000)
}

exports.computation = computation
