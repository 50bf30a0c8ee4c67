'use strict'

exports.load = async () => typeof require('toa-test-native')
