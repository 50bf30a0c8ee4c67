'use strict'

const moment = require('moment')
const { uniq } = require('lodash')

exports.suggest = async (input) => uniq([input.prefix, input.prefix.toLowerCase(), moment(0).utc().format('YYYY')])
