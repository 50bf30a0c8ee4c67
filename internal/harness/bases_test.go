package harness

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestBaseIndexPushedAndReadBack(t *testing.T) {
	addr := Registry(t)
	ref := PushTestBase(t, addr)
	if want := addr + "/bases/node:test"; ref != want {
		t.Errorf("ref = %q, want %q", ref, want)
	}
	idx, err := remote.Index(baseRef(t, ref))
	if err != nil {
		t.Fatalf("read back %s: %v", ref, err)
	}
	if d, want := digestOf(t, idx), digestOf(t, BaseIndex(t)); d != want {
		t.Errorf("index digest read back %s, pushed %s", d, want)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: index %s", ref, digestOf(t, idx))
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 2 {
		t.Fatalf("index: media type %s with %d manifests, want an OCI index of 2", im.MediaType, len(im.Manifests))
	}
	machineVersion := nodeVersion(t)
	images := map[string]v1.Image{}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		platform := cf.OS + "/" + cf.Architecture
		if cf.Variant != "" {
			platform += "/" + cf.Variant
		}
		if desc.Platform == nil || desc.Platform.String() != platform {
			t.Errorf("index says %v for an image whose config says %s", desc.Platform, platform)
		}
		if desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: media type %s", platform, desc.MediaType)
		}
		version := envValue(cf.Config.Env, "NODE_VERSION")
		switch platform {
		case "linux/amd64":
			if version != machineVersion {
				t.Errorf("amd64 NODE_VERSION = %q, want the machine's %q", version, machineVersion)
			}
		case "linux/arm64/v8":
			if majorOf(version) != majorOf(machineVersion) {
				t.Errorf("arm64 NODE_VERSION = %q, want node %s like the machine's %s", version, majorOf(machineVersion), machineVersion)
			}
		default:
			t.Errorf("unexpected platform %s", platform)
		}
		if !strings.Contains(envValue(cf.Config.Env, "PATH"), "/usr/local/bin") {
			t.Errorf("%s: PATH %q lacks /usr/local/bin", platform, envValue(cf.Config.Env, "PATH"))
		}
		t.Logf("%s: %s, node %s, %d bytes of layers", platform, desc.Digest, version, layersSize(t, img))
		images[platform] = img
	}

	amd64, arm64 := images["linux/amd64"], images["linux/arm64/v8"]
	if amd64 == nil || arm64 == nil {
		t.Fatalf("platforms %v, want linux/amd64 and linux/arm64/v8", platformsOf(images))
	}

	// amd64: node, what it links, env, the runtime, the users.
	files := fileSystem(t, amd64)
	want := []string{"usr/local/bin/node", "usr/bin/env", "usr/bin/sleep", "etc/passwd", "etc/group",
		"lib64/ld-linux-x86-64.so.2", baseRuntimeDir + "/package.json", baseRuntimeDir + "/bin/toa"}
	libs, err := sharedLibraries(mustMachineBinary(t, "node"))
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) < 3 {
		t.Errorf("ldd gave only %v for node", libs)
	}
	for _, l := range libs {
		want = append(want, l.Name)
	}
	for _, name := range want {
		if files[name] == nil {
			t.Errorf("amd64 base lacks %s", name)
		}
	}
	if h := files["usr/local/bin/toa"]; h == nil || h.Typeflag != tar.TypeSymlink ||
		h.Linkname != "../lib/node_modules/@toa.io/runtime/bin/toa" {
		t.Errorf("usr/local/bin/toa = %+v, want a symlink to ../lib/node_modules/@toa.io/runtime/bin/toa", h)
	}
	if h := files["tmp"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("tmp = %+v, want a folder", h)
	}
	for name, h := range files {
		if strings.Contains(name, "ld-musl") {
			t.Errorf("amd64 base holds %s: it is meant to be glibc", name)
		}
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: uid %d gid %d mtime %v, want 0 0 0", name, h.Uid, h.Gid, h.ModTime)
		}
	}

	// arm64: an aarch64 glibc node, the same runtime and users, and nothing else.
	files = fileSystem(t, arm64)
	for _, name := range []string{"usr/local/bin/node", "usr/local/bin/toa", "etc/passwd", baseRuntimeDir + "/bin/toa"} {
		if files[name] == nil {
			t.Errorf("arm64 base lacks %s", name)
		}
	}
	for name := range files {
		if strings.Contains(name, "ld-musl") || strings.HasPrefix(name, "lib") {
			t.Errorf("arm64 base holds %s", name)
		}
	}
	machine, interp := elfOf(t, arm64, "usr/local/bin/node")
	if machine != elf.EM_AARCH64 || interp != "/lib/ld-linux-aarch64.so.1" {
		t.Errorf("arm64 node: machine %v, interpreter %q, want EM_AARCH64 and glibc's /lib/ld-linux-aarch64.so.1", machine, interp)
	}

	// The layers both platforms share are the same blobs.
	la, lb := layerDigests(t, amd64), layerDigests(t, arm64)
	if len(la) != 4 || len(lb) != 3 || la[0] != lb[0] || la[3] != lb[2] {
		t.Errorf("layers: amd64 %v, arm64 %v; want the users and runtime layers shared", la, lb)
	}
}

func TestBaseIsReproducible(t *testing.T) {
	// A second build from nothing (an empty cache) gives the same bytes.
	first := BaseAMD64(t)
	content, err := amd64Content(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	again, err := ociFormat.image(content)
	if err != nil {
		t.Fatal(err)
	}
	if d, want := digestOf(t, again), digestOf(t, first); d != want {
		t.Errorf("amd64 base rebuilt: %s, first build %s", d, want)
	}
}

func TestBaseAMD64Runs(t *testing.T) {
	addr := Registry(t)
	ref := PushTestBaseAMD64(t, addr)
	img, err := remote.Image(baseRef(t, ref))
	if err != nil {
		t.Fatalf("read back %s: %v", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "amd64" || cf.OS != "linux" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	root := Unpack(t, img)

	stdout, stderr, code := Chroot(t, root, cf.Config, "/usr/local/bin/node", "-e", "console.log(process.version)")
	if want := "v" + nodeVersion(t) + "\n"; code != 0 || stdout != want {
		t.Fatalf("node in the base: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}

	// the manifests' preStop hook, in exec form as the kubelet runs it
	if stdout, stderr, code := Chroot(t, root, cf.Config, "sleep", "0"); code != 0 {
		t.Errorf("sleep 0 in the base (the preStop hook): exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// A composition as the product lays it out: one component with one installed dependency.
	writeFiles(t, filepath.Join(root, "composition"), map[string]string{
		"echo/manifest.toa.yaml":                       "name: echo\nnamespace: greeters\noperations:\n  name: ~\n",
		"echo/package.json":                            `{"name":"echo","dependencies":{"fake-dep":"1.0.0"}}`,
		"echo/index.js":                                "module.exports = {}\n",
		"echo/node_modules/fake-dep/package.json":      `{"name":"fake-dep","version":"1.0.0","main":"lib/main.js"}`,
		"echo/node_modules/fake-dep/lib/main.js":       "module.exports = 'fake'\n",
		"broken/manifest.toa.yaml":                     "name: broken\n",
		"broken/package.json":                          `{"name":"broken","dependencies":{"not-installed":"1.0.0"}}`,
		"serviced/package.json":                        `{"name":"service"}`,
		"echo/node_modules/.package-lock.json":         `{}`,
		"echo/node_modules/fake-dep/lib/not-loaded.js": "throw new Error('not this one')\n",
	})
	cfg := cf.Config
	cfg.WorkingDir = "/composition"
	cfg.Env = append(cfg.Env, "NODE_ENV=production")

	// exec form, found on the image's PATH, started through #!/usr/bin/env node
	stdout, stderr, code = Chroot(t, root, cfg, "toa", "compose", "echo")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 2 || lines[1] != "composed 1 components" {
		t.Fatalf("toa compose echo: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var composed struct {
		Component, ID string
		Dependencies  map[string]string
	}
	if err := json.Unmarshal([]byte(lines[0]), &composed); err != nil {
		t.Fatalf("toa compose printed %q: %v", lines[0], err)
	}
	if composed.Component != "echo" || composed.ID != "greeters.echo" ||
		composed.Dependencies["fake-dep"] != "/composition/echo/node_modules/fake-dep/lib/main.js" {
		t.Errorf("toa compose echo printed %+v", composed)
	}

	// `*` takes every folder; a dependency that is not installed names the component and package.
	stdout, stderr, code = Chroot(t, root, cfg, "toa", "compose", "*")
	if code != 1 || !strings.Contains(stderr, "component broken: dependency not-installed cannot be loaded") ||
		!strings.Contains(stderr, "component serviced: cannot read /composition/serviced/manifest.toa.yaml") ||
		!strings.Contains(stdout, `"component":"echo"`) || strings.Contains(stdout, "composed") {
		t.Errorf("toa compose *: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if err := os.RemoveAll(filepath.Join(root, "composition", "broken")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "composition", "serviced")); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = Chroot(t, root, cfg, "toa", "mono", "*")
	if code != 0 || !strings.HasSuffix(stdout, "composed 1 components\n") {
		t.Errorf("toa mono *: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	stdout, _, code = Chroot(t, root, cfg, "no-such-command")
	if code != 127 || stdout != "" {
		t.Errorf("a command the image lacks: exit %d, want 127", code)
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffc)\n" +
		"\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f5d)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f5d86fb3000)\n"
	got, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "/lib/x86_64-linux-gnu/libstdc++.so.6,/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("parseLdd = %v", got)
	}
	if _, err := parseLdd("\tlibfoo.so.1 => not found\n"); err == nil || !strings.Contains(err.Error(), "libfoo.so.1") {
		t.Errorf("a library not found: err %v", err)
	}
	if got, err := parseLdd("\tstatically linked\n"); err != nil || len(got) != 0 {
		t.Errorf("static: %v %v", got, err)
	}
}

func nodeVersion(t testing.TB) string {
	t.Helper()
	v, err := nodeVersionOf("node")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustMachineBinary(t testing.TB, program string) string {
	t.Helper()
	p, err := machineBinary(program)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func majorOf(version string) string { m, _, _ := strings.Cut(version, "."); return m }

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func platformsOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// fileSystem returns the headers of the image's flattened file system by name (no leading
// slash, no trailing slash).
func fileSystem(t testing.TB, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.Trim(h.Name, "/")] = h
	}
}

// elfOf reads a file of the image as ELF: its machine and its program interpreter.
func elfOf(t testing.TB, img v1.Image, name string) (elf.Machine, string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the image: %v", name, err)
		}
		if strings.Trim(h.Name, "/") != name {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var interp string
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, err := io.ReadAll(p.Open())
				if err != nil {
					t.Fatal(err)
				}
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		return f.Machine, interp
	}
}

func layerDigests(t testing.TB, img v1.Image) []string {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("layer %s: media type %s", l.Digest, l.MediaType)
		}
		out = append(out, l.Digest.String())
	}
	return out
}

func layersSize(t testing.TB, img v1.Image) int64 {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
