'use strict'

exports.append = async () => null
