'use strict'

// require('@toa.io/runtime') gives the stand-in's version, as code that looks for the
// installed runtime expects to find one.
exports.version = require('./package.json').version
