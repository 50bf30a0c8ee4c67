'use strict'

exports.load = async () => 'contained'
