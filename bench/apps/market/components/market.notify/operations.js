'use strict'

const pino = require('pino')

const log = pino({ level: 'silent' })

exports.notify = async (input) => {
  log.info({ text: input.text }, 'notify')
  return input.text.slice(0, 160)
}
