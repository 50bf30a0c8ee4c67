'use strict'

// Stand-in for @toa.io/storages.null, the storage of an entity declared `storage: ~`, to the
// contract of connectors/storages.null/src/index.js (toa-io/toa): it exports a Factory for the
// runtime and no deployment(), so it deploys nothing.

exports.Factory = class Factory {}
