package layer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// The split of a component's node_modules into layers (DependencyLayers). Its constants are part
// of every split layer's cache key and decide the layers' bytes: they change only with a reason
// written here.
const (
	// LargePackage is the size from which a package (with what it nests) is a layer of its own,
	// as long as the budget has room: typescript, @aws-sdk/client-s3 and the like change rarely
	// and cost most of a component's bytes.
	LargePackage = 1 << 20
	// MaxBuckets is how many layers the other packages share at most, each by a hash of its
	// install path: a bump of one small package changes one bucket, about 1/16 of them.
	MaxBuckets = 16
	// splitVersion names the rule in the cache key.
	splitVersion = "split 1: meta, large >= 1 MiB, fnv-1a buckets"
)

// DependencyLayers is Dependencies laid out as at most budget layers, so that a change of the
// lockfile changes only the layers that hold the packages that changed:
//
//   - the first holds npm's own metadata: node_modules/.package-lock.json (which the SBOM reads),
//     the .bin links and whatever else of node_modules begins with a dot;
//   - then, from the largest, each package of LargePackage bytes or more in a layer of its own,
//     while the budget has room for them besides the buckets;
//   - then the other packages in up to MaxBuckets layers, each in the bucket of an FNV-1a hash of
//     its install path ("node_modules/@scope/name"), so that a package stays in its bucket
//     whatever else the lockfile adds or removes. Empty buckets are left out.
//
// A package is node_modules/<name> or node_modules/@scope/<name> with everything under it, the
// node_modules it nests included. Packages that share a file (hard links) go together, in the
// layer of the first of them by path, so that no link points into another layer.
//
// With a budget of 1 it is Dependencies' one layer, byte for byte. Each layer is reproducible
// as Dependencies' is; the list is cached under the install's key and the budget.
func DependencyLayers(ctx context.Context, c *toa.Component, p Platform, budget int, opts ...Option) ([]v1.Layer, error) {
	return dependencies(ctx, c, p, budget, opts)
}

// splitter returns the parts of a job's tree for the budget, or nil for a budget of one layer.
func splitter(budget int, modules func(staging string) string, dst string) func(staging string) ([]part, error) {
	if budget <= 1 {
		return nil
	}
	return func(staging string) ([]part, error) {
		dir := modules(staging)
		if !fileExists(dir) {
			return nil, nil // the single layer of an empty install, as Dependencies writes it
		}
		return splitModules(dir, dst, budget)
	}
}

// part is one layer of a split: entries of node_modules (slash-separated paths relative to it)
// written under dst.
type part struct {
	what    string // "metadata", "typescript", "bucket 3"
	modules string // the node_modules folder on the disk
	dst     string // its name in the layer: composition/<label>/node_modules
	entries []string
}

// fill writes the part: node_modules itself, then each entry with what it holds, in order.
func (p part) fill(w *tarWriter) error {
	if err := w.dir(p.dst); err != nil {
		return err
	}
	for _, e := range p.entries {
		if err := writeEntry(w, filepath.Join(p.modules, filepath.FromSlash(e)), path.Join(p.dst, e)); err != nil {
			return err
		}
	}
	return nil
}

// writeEntry writes one file, link or folder (with everything in it) of an install.
func writeEntry(w *tarWriter, src, dst string) error {
	info, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch mode := info.Mode(); {
	case mode.IsDir():
		return w.tree(src, dst, treeOptions{skip: installedExcluded})
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return w.symlink(dst, target)
	case mode.IsRegular():
		return w.regular(src, dst)
	}
	return nil // sockets, pipes and devices are left out, as tree leaves them
}

// pkgGroup is packages that go into one layer together: one package, or several that share
// files through hard links.
type pkgGroup struct {
	paths []string // sorted
	size  int64
}

// splitModules lays the node_modules folder dir out as at most budget parts (budget ≥ 2).
func splitModules(dir, dst string, budget int) ([]part, error) {
	meta, packages, err := listModules(dir)
	if err != nil {
		return nil, err
	}
	groups, err := groupPackages(dir, packages)
	if err != nil {
		return nil, err
	}
	buckets := min(MaxBuckets, max(1, (budget-1)/2))
	slots := budget - 1 - buckets
	// the largest first; equal sizes by path, so that the choice depends on nothing else
	sort.SliceStable(groups, func(i, j int) bool {
		if groups[i].size != groups[j].size {
			return groups[i].size > groups[j].size
		}
		return groups[i].paths[0] < groups[j].paths[0]
	})
	var large []part
	bucket := make([][]string, buckets)
	for _, g := range groups {
		if g.size >= LargePackage && len(large) < slots {
			large = append(large, part{what: g.paths[0], entries: g.paths})
			continue
		}
		i := bucketOf(g.paths[0], buckets)
		bucket[i] = append(bucket[i], g.paths...)
	}
	sort.Slice(large, func(i, j int) bool { return large[i].what < large[j].what })
	parts := []part{{what: "metadata", entries: meta}}
	parts = append(parts, large...)
	for i, entries := range bucket {
		if len(entries) == 0 {
			continue
		}
		sort.Strings(entries)
		parts = append(parts, part{what: fmt.Sprintf("bucket %d", i), entries: entries})
	}
	for i := range parts {
		parts[i].modules, parts[i].dst = dir, dst
	}
	return parts, nil
}

// bucketOf is the bucket of an install path: FNV-1a of "node_modules/<path>", modulo n.
func bucketOf(pkgPath string, n int) int {
	h := fnv.New32a()
	h.Write([]byte("node_modules/" + pkgPath))
	return int(h.Sum32() % uint32(n))
}

// listModules reads node_modules: npm's metadata (names beginning with a dot), and the packages,
// "name" and "@scope/name", each sorted.
func listModules(dir string) (meta, packages []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case installedExcluded[name]:
		case strings.HasPrefix(name, "."):
			meta = append(meta, name)
		case strings.HasPrefix(name, "@") && e.IsDir():
			scoped, err := os.ReadDir(filepath.Join(dir, name))
			if err != nil {
				return nil, nil, err
			}
			if len(scoped) == 0 {
				packages = append(packages, name) // an empty scope folder, kept as it is
			}
			for _, s := range scoped {
				if !installedExcluded[s.Name()] {
					packages = append(packages, name+"/"+s.Name())
				}
			}
		default:
			packages = append(packages, name)
		}
	}
	sort.Strings(meta)
	sort.Strings(packages)
	return meta, packages, nil
}

// groupPackages measures each package and joins those that share a file, by union-find over
// the files of more than one name.
func groupPackages(dir string, packages []string) ([]pkgGroup, error) {
	parent := make([]int, len(packages))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	sizes := make([]int64, len(packages))
	owner := map[fileID]int{} // a linked file's first package
	for i, p := range packages {
		err := filepath.WalkDir(filepath.Join(dir, filepath.FromSlash(p)), func(file string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if installedExcluded[d.Name()] && d.IsDir() {
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			id, links, ok := inode(info)
			if ok && links > 1 {
				if first, seen := owner[id]; seen {
					if a, b := find(first), find(i); a != b {
						parent[max(a, b)] = min(a, b) // the group is named by its first path
					}
					return nil // its bytes are counted once, where first written
				}
				owner[id] = i
			}
			sizes[i] += info.Size()
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
	}
	byRoot := map[int]*pkgGroup{}
	var out []*pkgGroup
	for i, p := range packages {
		r := find(i)
		g := byRoot[r]
		if g == nil {
			g = &pkgGroup{}
			byRoot[r] = g
			out = append(out, g)
		}
		g.paths = append(g.paths, p)
		g.size += sizes[i]
	}
	groups := make([]pkgGroup, len(out))
	for i, g := range out {
		groups[i] = *g
	}
	return groups, nil
}

// withSplit makes j's tree at most budget layers, and says so in its key.
func withSplit(j job, c *toa.Component, budget int) job {
	j.parts = splitter(budget, j.modules, Root+"/"+c.Locator.Label+"/node_modules")
	if j.parts != nil {
		j.key.field("layers", fmt.Sprintf("%s, at most %d", splitVersion, budget))
	}
	return j
}

// writeJob writes the layers of a job from its staging folder: fill's one, or its parts'.
func (o *options) writeJob(staging string, j job) ([]*fileLayer, error) {
	if j.parts == nil {
		l, err := o.writeLayer(func(w *tarWriter) error { return j.fill(staging, w) })
		if err != nil {
			return nil, err
		}
		return []*fileLayer{l}, nil
	}
	parts, err := j.parts(staging)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		l, err := o.writeLayer(func(w *tarWriter) error { return j.fill(staging, w) })
		if err != nil {
			return nil, err
		}
		return []*fileLayer{l}, nil
	}
	out := make([]*fileLayer, 0, len(parts))
	for _, p := range parts {
		l, err := o.writePart(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.what, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// writePart writes one part of a split. Its tar stream is hashed first, without compressing:
// a part whose stream the cache already has compressed (a bucket a bump did not touch) is taken
// from there, so that a bump compresses only the layers that changed.
//
// Before that, a part is looked up by the stats of its files (partStatKey): a bucket of a tree
// installed over (tree.go) whose files npm did not touch has the key it had when its layer was
// written, and is neither read nor hashed again.
func (o *options) writePart(p part) (*fileLayer, error) {
	mtime, err := o.mtime()
	if err != nil {
		return nil, err
	}
	statKey, err := partStatKey(p, mtime)
	if err == nil {
		if l := o.lookup(partsKind, statKey); l != nil {
			return l, nil
		}
	}
	l, err := o.writePartStream(p, mtime)
	if err != nil {
		return nil, err
	}
	if statKey != "" {
		if err := o.keep(partsKind, statKey, l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// writePartStream is writePart by the digest of the part's tar stream.
func (o *options) writePartStream(p part, mtime time.Time) (*fileLayer, error) {
	diffID, err := diffIDOf(mtime, p.fill)
	if err != nil {
		return nil, err
	}
	key := "sha256-" + diffID.Hex
	if l := o.lookup(partsKind, key); l != nil && l.diffID == diffID {
		return l, nil
	}
	l, err := o.writeLayer(p.fill)
	if err != nil {
		return nil, err
	}
	if err := o.keep(partsKind, key, l); err != nil {
		return nil, err
	}
	return l, nil
}

// partStatKey is a key of the part by the stats of its files: the part's names, the time of
// its entries, and each file's path, mode, size, link count, link target, modification and change
// times and inode (treeDigest's, which a file written since cannot keep). "" with an error when
// the system gives no change times.
func partStatKey(p part, mtime time.Time) (string, error) {
	k := newKey("split part by stats")
	k.field("rule", splitVersion)
	k.field("dst", p.dst)
	k.field("mtime", mtime.String())
	for _, e := range p.entries {
		src := filepath.Join(p.modules, filepath.FromSlash(e))
		info, err := os.Lstat(src)
		if err != nil {
			return "", err
		}
		stamp, ok := changeStamp(info)
		if !ok {
			return "", errors.New("no change times on this system")
		}
		k.field("entry "+e, fmt.Sprintf("%o %d %d %s", info.Mode(), info.Size(), info.ModTime().UnixNano(), stamp))
		if !info.IsDir() {
			continue
		}
		digest, _, err := treeDigest(src)
		if err != nil {
			return "", err
		}
		k.field("tree", digest)
	}
	return "stat-" + k.String(), nil
}

// partsKind is the cache's folder of split layers by the digest of their tar stream.
const partsKind = "parts"

// diffIDOf is the digest of the tar stream fill writes.
func diffIDOf(mtime time.Time, fill func(*tarWriter) error) (v1.Hash, error) {
	h := sha256.New()
	tw := newTarWriter(h, mtime)
	if err := fill(tw); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, err
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, nil
}

// splitRecord is what the cache keeps under a split job's key: its layers, in order.
type splitRecord struct {
	Layers []record `json:"layers"`
}

// lookupAll returns the layers kept under key, or nil when one is missing or damaged.
func (o *options) lookupAll(kind, key string) []v1.Layer {
	data, err := os.ReadFile(o.recordPath(kind, key))
	if err != nil {
		return nil
	}
	var r splitRecord
	if json.Unmarshal(data, &r) != nil || len(r.Layers) == 0 {
		if l := o.lookup(kind, key); l != nil {
			return []v1.Layer{l}
		}
		return nil
	}
	var out []v1.Layer
	for _, lr := range r.Layers {
		l := o.lookupPart(lr)
		if l == nil {
			return nil
		}
		out = append(out, l)
	}
	return out
}

// lookupPart is the layer of a record of a split, when the cache has its bytes whole.
func (o *options) lookupPart(r record) *fileLayer {
	diffID, err := v1.NewHash(r.DiffID)
	if err != nil {
		return nil
	}
	l := o.lookup(partsKind, "sha256-"+diffID.Hex)
	if l == nil || l.digest.String() != r.Digest {
		return nil
	}
	return l
}

// keepAll records the layers under key: one as keep records it, several as a splitRecord.
func (o *options) keepAll(kind, key string, layers []*fileLayer) error {
	if len(layers) == 1 {
		return o.keep(kind, key, layers[0])
	}
	r := splitRecord{}
	for _, l := range layers {
		r.Layers = append(r.Layers, record{Digest: l.digest.String(), DiffID: l.diffID.String(), Size: l.size})
	}
	data, _ := json.Marshal(r)
	return fsys.WriteFile(o.recordPath(kind, key), data, 0o644)
}

func asLayers(layers []*fileLayer) []v1.Layer {
	out := make([]v1.Layer, len(layers))
	for i, l := range layers {
		out[i] = l
	}
	return out
}
