// Package layer makes the bytes that become image layers: deterministic tar streams of a
// component's sources, of the node_modules npm installs on the runner for one platform, and of
// npm's global installs. It knows files and npm, and nothing of registries.
//
// Every layer is an immutable v1.Layer backed by a gzip file in the cache, written in one
// streaming pass. Entries are in order (a directory, then its entries by name), with mtime
// SOURCE_DATE_EPOCH or 0, uid and gid 0 without names, modes 0755 for directories and
// executables and 0644 for other files, symlinks as symlinks, and no extended records but the
// PAX names USTAR cannot hold; gzip is at CompressionLevel. The same files give the same digest
// in any folder.
//
// The cache (WithCacheDir; $TOA_CACHE, else $HOME/.cache/toa-deploy):
//
//	layers/sha256/<hex>.tar.gz   a layer, named by its digest (the compressed bytes)
//	layers/deps/<key>.json       the layer of a component's dependencies for a platform:
//	layers/global/<key>.json     {"digest", "diffID", "size"}; key = sha256 of the inputs
//	npm/                         npm's own cache (npm --cache)
//	tmp/                         staging folders of running installs
//
// Each folder is one of fsys's caches (internal/fsys/cache.go names them all); toa-push prunes them to
// TOA_CACHE_MAX at the end of a run, least recently used first. A record whose layer is gone is
// a miss: the layer is made again.
package layer
