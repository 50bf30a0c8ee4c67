package layer

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// CompressionLevel is the gzip level of every layer, with klauspost/compress's gzip (the one
// go-containerregistry already depends on). Its level 6 compresses as gzip -6 does, at about
// three times gzip -6's speed and faster than gzip -1 (see the package's benchmark). A layer's
// digest depends on the compressor and its level: they change only with a reason written here.
const CompressionLevel = 6

// Option tunes Sources, SourcesOf, Dependencies and Global. Options a function does not use are
// ignored by it.
type Option func(*options)

type options struct {
	cacheRoot   string
	npmCache    string
	epoch       *time.Time
	mediaType   types.MediaType
	compression Compression
	contextRoot string
	registry    string
	proxy       string
	arguments   []string
	baseNode    string
	toolchain   *Toolchain
	runnerGiven *Runner
	npmConfig   map[string]string
	warn        func(string)
	base        v1.Image
	npmRebuild  bool        // the scripts in the base run by `npm rebuild`, even where runscript.js can (tests)
	prefetched  *baseFuture // the base being unpacked while npm installs (prefetchBase)
	holds       *fsys.Holds // the unpacked bases in use, which other runs' prunes leave (WithHolds)
	// scriptsOnRunner runs the install scripts of a target that is the runner's own platform on
	// the runner, as npm does (WithScriptsOnRunner); by default every script runs in the base
	scriptsOnRunner bool
	scriptNetwork   string // "" (the runner's network) or "none" (WithScriptNetwork)
}

// WithCacheDir sets the cache's root folder. Default: $TOA_CACHE, else $HOME/.cache/toa-deploy.
// Layers are kept under <root>/layers, npm's cache under <root>/npm.
func WithCacheDir(root string) Option { return func(o *options) { o.cacheRoot = root } }

// WithNpmCache sets npm's cache folder (npm --cache). Default: <cache root>/npm.
func WithNpmCache(dir string) Option { return func(o *options) { o.npmCache = dir } }

// WithEpoch sets the modification time of every entry. Default: $SOURCE_DATE_EPOCH, else 0
// (1970-01-01). Sub-second parts are dropped.
func WithEpoch(t time.Time) Option { return func(o *options) { o.epoch = &t } }

// WithMediaType sets what MediaType() reports. Default: types.OCILayer. The bytes, and so the
// digest, do not depend on it; match the base's layers (types.DockerLayer for a Docker v2 base).
func WithMediaType(mt types.MediaType) Option { return func(o *options) { o.mediaType = mt } }

// WithContextRoot names the Toa context's folder, whose .npmrc npm reads besides the component's.
func WithContextRoot(dir string) Option { return func(o *options) { o.contextRoot = dir } }

// WithRegistry sets npm's registry and proxy: the context's runtime.registry and runtime.proxy.
// Empty strings leave npm's own configuration.
func WithRegistry(registry, proxy string) Option {
	return func(o *options) { o.registry, o.proxy = registry, proxy }
}

// WithArguments names the environment variables handed to npm: registry.build.arguments. npm
// runs in the runner's environment, so they reach it (and the ${NAME} of an .npmrc) as they are;
// a name not set on the runner is reported as a warning. Their values are in no layer and no
// cache key.
func WithArguments(names ...string) Option {
	return func(o *options) { o.arguments = append(o.arguments, names...) }
}

// WithBaseNode gives the version of Node in the base image of the platform ("24.14.0", or its
// NODE_VERSION "v24.14.0"). When its major differs from the runner's, packages that build native
// code are refused and install scripts are skipped. Without it, the runner's Node is assumed.
func WithBaseNode(version string) Option { return func(o *options) { o.baseNode = version } }

// WithToolchain gives the runner's node and npm versions, as DetectToolchain found them, so that
// they are not asked for again. They are part of the cache keys.
func WithToolchain(t Toolchain) Option { return func(o *options) { o.toolchain = &t } }

// WithRunner gives the runner as DetectRunner found it, so that node is not asked again for
// each install. Default: asked for each install.
func WithRunner(r *Runner) Option { return func(o *options) { o.runnerGiven = r } }

// WithNpmConfig adds npm configuration, as `npm config set key value` lines of build.run give it
// (see ParseRun). It is written to the .npmrc npm reads for the install, below the context's and
// the component's own .npmrc files, and never into a layer. Values may use ${NAME} of the runner's
// environment.
func WithNpmConfig(config map[string]string) Option {
	return func(o *options) {
		if o.npmConfig == nil {
			o.npmConfig = map[string]string{}
		}
		for k, v := range config {
			o.npmConfig[k] = v
		}
	}
}

// WithScriptsOnRunner runs the install scripts of a target that is the runner's own platform, libc
// and Node major with npm on the runner, as toa-push did before 2026-12: they can read the
// runner's files (its credentials, the signing key) and what they write goes into the image. The
// default runs every install script inside the target's base, whatever the target.
func WithScriptsOnRunner() Option { return func(o *options) { o.scriptsOnRunner = true } }

// WithScriptNetwork sets the network of build.run lines and install scripts in the base: "" (the
// runner's, so that packages download their prebuilt binaries) or "none" (loopback only, as
// BuildKit's RUN --network=none).
func WithScriptNetwork(network string) Option { return func(o *options) { o.scriptNetwork = network } }

// WithHolds holds every base unpacked for the work with holds (fsys.Holds), until the caller
// releases them: another run that prunes the cache meanwhile leaves them.
func WithHolds(holds *fsys.Holds) Option { return func(o *options) { o.holds = holds } }

// WithWarnings receives what deserves the user's attention but does not stop the build: an
// install without a lockfile, npm's own warnings, an argument not set. Default: dropped.
func WithWarnings(warn func(string)) Option { return func(o *options) { o.warn = warn } }

func newOptions(opts []Option) (*options, error) {
	o := &options{mediaType: types.OCILayer, compression: Gzip, warn: func(string) {}}
	for _, opt := range opts {
		opt(o)
	}
	if o.cacheRoot == "" {
		root, err := fsys.CacheRoot()
		if err != nil {
			return nil, err
		}
		o.cacheRoot = root
	}
	if o.npmCache == "" {
		o.npmCache = fsys.Npm.Dir(o.cacheRoot)
	}
	return o, nil
}

// mtime is the time every entry carries.
func (o *options) mtime() (time.Time, error) {
	if o.epoch != nil {
		return time.Unix(o.epoch.Unix(), 0).UTC(), nil
	}
	return SourceDateEpoch()
}

// SourceDateEpoch is the time of every entry of every layer, and of every image's config:
// $SOURCE_DATE_EPOCH, else the Unix epoch, so that the same inputs give the same digests (see
// reproducible-builds.org). A value that is not a number of seconds since 1970 is a
// *fault.Input naming the variable and what is wrong with it, as the specification asks ("the
// build process SHOULD exit with a non-zero error code"). It is the one place the variable is
// read: toa-push reads it once, before any work, and hands the time to every room that writes
// one (layers, configs, SBOMs, provenance, the artifact).
func SourceDateEpoch() (time.Time, error) {
	s := strings.TrimSpace(os.Getenv("SOURCE_DATE_EPOCH"))
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	var wrong string
	switch {
	case err != nil:
		wrong = "not a whole number of seconds since 1970-01-01"
	case n < 0:
		wrong = "before 1970-01-01"
	case n > maxEpoch:
		wrong = fmt.Sprintf("after %s, the latest time a tar header holds (%d)", time.Unix(maxEpoch, 0).UTC().Format(time.DateOnly), int64(maxEpoch))
	default:
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Time{}, &fault.Input{Key: "SOURCE_DATE_EPOCH", Message: fmt.Sprintf("'%s' is not a time: %s", fault.Printable(s), wrong),
		Hint: "set it to a number of seconds since 1970-01-01, like `git log -1 --format=%ct`, or unset it"}
}

// maxEpoch is the latest modification time a tar header's 11 octal digits hold.
const maxEpoch = 1<<33 - 1

func (o *options) layersDir() string { return filepath.Join(o.cacheRoot, "layers") }

// Platform is what a layer of installed packages is for: an image platform and the C library of
// the base image.
type Platform struct {
	OS           string // "linux"
	Architecture string // "amd64", "arm64", "arm", as in OCI
	Variant      string // "v7" for arm/v7, may be empty
	Libc         string // "glibc" or "musl"
}

// ParsePlatform reads a platform as registry.platforms spells it ("linux/arm/v7") with the base's
// C library.
func ParsePlatform(s, libc string) (Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Platform{}, fmt.Errorf("platform '%s' is not os/architecture[/variant]", s)
	}
	p := Platform{OS: parts[0], Architecture: parts[1], Libc: libc}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// String spells the platform as "linux/arm/v7 (musl)".
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	if p.Libc != "" {
		s += " (" + p.Libc + ")"
	}
	return s
}

// nodeArch maps OCI architectures to Node's process.arch, which npm's --cpu and packages' "cpu"
// fields use.
var nodeArch = map[string]string{
	"amd64": "x64", "arm64": "arm64", "arm": "arm", "386": "ia32", "ppc64le": "ppc64",
	"s390x": "s390x", "riscv64": "riscv64", "loong64": "loong64", "mips64le": "mips64el",
}

// npm checks the platform and returns npm's --cpu for it.
func (p Platform) npm() (cpu string, err error) {
	if p.OS != "linux" {
		return "", &fault.Input{Key: "registry.platforms", Message: fmt.Sprintf("%s: images of Toa run on linux", p),
			Hint: "name linux platforms, like linux/amd64"}
	}
	cpu, ok := nodeArch[p.Architecture]
	if !ok {
		return "", &fault.Input{Key: "registry.platforms", Message: fmt.Sprintf("%s: Node.js has no build for the architecture '%s'", p, p.Architecture)}
	}
	if p.Libc != "glibc" && p.Libc != "musl" {
		return "", fmt.Errorf("platform %s: libc is '%s', not glibc or musl", p, p.Libc)
	}
	return cpu, nil
}

// fileLayer is a compressed layer in the cache.
type fileLayer struct {
	path        string
	digest      v1.Hash
	diffID      v1.Hash
	size        int64
	mediaType   types.MediaType
	compression Compression
}

var _ v1.Layer = (*fileLayer)(nil)

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return l.mediaType, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return uncompress(l.path, l.compression) }

// CachedFile is the layer's file in the cache, for a message that names it when its bytes turn
// out damaged (the image package removes it then, so that the next run builds it anew).
func (l *fileLayer) CachedFile() string { return l.path }

func uncompress(path string, c Compression) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	z, err := decompress(c, bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &readCloser{Reader: z, close: func() error { z.Close(); return f.Close() }}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r *readCloser) Close() error { return r.close() }

// lazyLayer writes its tar stream the first time one of its methods is called, and serves every
// call from the compressed file it wrote.
type lazyLayer struct {
	mediaType types.MediaType
	write     func() (*fileLayer, error)
	once      sync.Once
	layer     *fileLayer
	err       error
}

var _ v1.Layer = (*lazyLayer)(nil)

func (l *lazyLayer) get() (*fileLayer, error) {
	l.once.Do(func() { l.layer, l.err = l.write() })
	return l.layer, l.err
}

func (l *lazyLayer) Digest() (v1.Hash, error) {
	fl, err := l.get()
	if err != nil {
		return v1.Hash{}, err
	}
	return fl.digest, nil
}

func (l *lazyLayer) DiffID() (v1.Hash, error) {
	fl, err := l.get()
	if err != nil {
		return v1.Hash{}, err
	}
	return fl.diffID, nil
}

func (l *lazyLayer) Size() (int64, error) {
	fl, err := l.get()
	if err != nil {
		return 0, err
	}
	return fl.size, nil
}

func (l *lazyLayer) MediaType() (types.MediaType, error) { return l.mediaType, nil }

// CachedFile is the file the layer was written to, or "" before it is written.
func (l *lazyLayer) CachedFile() string {
	if fl, err := l.get(); err == nil {
		return fl.path
	}
	return ""
}

func (l *lazyLayer) Compressed() (io.ReadCloser, error) {
	fl, err := l.get()
	if err != nil {
		return nil, err
	}
	return fl.Compressed()
}

func (l *lazyLayer) Uncompressed() (io.ReadCloser, error) {
	fl, err := l.get()
	if err != nil {
		return nil, err
	}
	return fl.Uncompressed()
}

// countingHash is a hash that counts what it is given.
type countingHash struct {
	hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.Hash.Write(p)
}

// writeLayer runs fill on a tar stream that goes through gzip into the cache, in one pass, and
// returns the layer it made: <root>/layers/sha256/<hex of the compressed digest>.tar.gz.
func (o *options) writeLayer(fill func(*tarWriter) error) (*fileLayer, error) {
	mtime, err := o.mtime()
	if err != nil {
		return nil, err
	}
	dir := fsys.Layers.Dir(o.cacheRoot)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the layer cache: %w", err)
	}
	sweep(dir, ".partial-")
	f, err := fsys.Create(dir, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create the layer cache: %w", err)
	}
	defer f.Discard()
	compressed := &countingHash{Hash: sha256.New()}
	// the members come compressed whole: no buffer between them and the file
	z := newMemberWriter(io.MultiWriter(f, compressed), o.compression)
	uncompressed := sha256.New()
	tw := newTarWriter(io.MultiWriter(z, uncompressed), mtime)
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	l := &fileLayer{
		digest:      v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(compressed.Sum(nil))},
		diffID:      v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(uncompressed.Sum(nil))},
		size:        compressed.n,
		mediaType:   o.mediaType,
		compression: o.compression,
	}
	l.path = fsys.Layers.Path(o.cacheRoot, l.digest.Hex+o.compression.ext())
	if err := f.Commit(l.path); err != nil {
		return nil, fmt.Errorf("keep the layer in the cache: %w", err)
	}
	return l, nil
}

// record is what the cache keeps under a key: the layer it made.
type record struct {
	Digest string `json:"digest"`
	DiffID string `json:"diffID"`
	Size   int64  `json:"size"`
}

// recordCache is the cache of fsys's table that keeps the records of a kind of layer.
func recordCache(kind string) fsys.Cache {
	switch kind {
	case "deps":
		return fsys.DepsLayers
	case "global":
		return fsys.GlobalLayers
	case partsKind:
		return fsys.PartLayers
	}
	return fsys.FileLayers
}

func (o *options) recordPath(kind, key string) string {
	// A record names the compression that made its layer: a layer over MemberSize that an
	// earlier toa-push compressed as one gzip member has other bytes (and digest) than the
	// members made now, so its records must not be taken for this one's.
	name := key + ".gzip-members.json"
	if o.compression == Zstd {
		name = key + "." + string(Zstd) + ".json"
	}
	return recordCache(kind).Path(o.cacheRoot, name)
}

// lookup returns the layer kept under key, or nil when there is none (or it is gone).
func (o *options) lookup(kind, key string) *fileLayer {
	data, ok := recordCache(kind).Read(o.recordPath(kind, key))
	if !ok {
		return nil
	}
	var r record
	if json.Unmarshal(data, &r) != nil {
		return nil
	}
	digest, err1 := v1.NewHash(r.Digest)
	diffID, err2 := v1.NewHash(r.DiffID)
	if err1 != nil || err2 != nil {
		return nil
	}
	l := &fileLayer{path: fsys.Layers.Path(o.cacheRoot, digest.Hex+o.compression.ext()),
		digest: digest, diffID: diffID, size: r.Size, mediaType: o.mediaType, compression: o.compression}
	if info, err := os.Stat(l.path); err != nil || info.Size() != r.Size {
		return nil
	}
	// a byte changed on the disk would be pushed as it is, and every registry would refuse the
	// blob (DIGEST_INVALID) on every run: the bytes are checked before they are used
	if err := verify(l.path, digest); err != nil {
		os.Remove(l.path)
		os.Remove(o.recordPath(kind, key))
		o.warn(fmt.Sprintf("the cache %s held a damaged layer (%v): it is removed, and the layer made again", o.layersDir(), err))
		return nil
	}
	fsys.Touch(l.path) // used: the last to go when the cache is pruned
	return l
}

// verify checks that the file's bytes are the digest's.
func verify(path string, digest v1.Hash) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest.Hex {
		return fmt.Errorf("%s is sha256:%s, not its name's %s", filepath.Base(path), got, digest)
	}
	return nil
}

// keep records l under key.
func (o *options) keep(kind, key string, l *fileLayer) error {
	data, _ := json.Marshal(record{Digest: l.digest.String(), DiffID: l.diffID.String(), Size: l.size})
	// written whole beside it and renamed over it: a run that stops, or another one at once,
	// never leaves a record half written
	return fsys.WriteFile(o.recordPath(kind, key), data, 0o644)
}
