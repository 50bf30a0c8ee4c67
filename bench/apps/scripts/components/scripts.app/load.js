'use strict'

exports.load = async () => 'scripts'
