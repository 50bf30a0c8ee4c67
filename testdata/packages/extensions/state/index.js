'use strict'

// Stand-in for @toa.io/extensions.state (`state: ~` in a manifest), to the contract of
// extensions/state/source/index.js (toa-io/toa): it exports a Factory for the runtime and no
// manifest() or deployment(), so it deploys nothing.

exports.Factory = class Factory {}
