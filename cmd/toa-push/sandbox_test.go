package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// TestBuildInBase pushes an application with a native addon, a postinstall and build.run lines
// on the Debian bases without their compiler (Node 18; arm64 under QEMU), whose first lines
// install Debian's compiler packages, served on loopback, as Toa 289's `RUN apk add g++ make`
// did: in each platform's image the addon is an ELF of that CPU, built by that compiler, which
// the image's own node loads; the postinstall's marker is there, and the lines' layer holds the
// compiler, the file a line made and the whiteout of the file a line removed. Each base's layer
// is read twice: unpacked, which says its libc too (no look through its layers before), and by
// the SBOM's catalogue. A second push from nothing, on private copies of the bases (as without
// overlayfs), gives the same layers.
func TestBuildInBase(t *testing.T) {
	addr, rec := harness.RegistryWithLog(t)
	harness.PushDebianBaseWithoutCompiler(t, addr)
	other := harness.Registry(t) // for a second push from nothing
	harness.PushDebianBaseWithoutCompiler(t, other)
	t.Setenv("TOA_TEST_PACKAGES", harness.ServeCompilerPackages(t))
	rec.Reset()
	dir := nativeWithoutCompiler(t, addr, compilerLines)
	checkout := tree(t, dir)
	// TOA_SIGN_KEY would make toa-push sign; the layer package's test covers it
	t.Setenv("COSIGN_PASSWORD", "secret-password")
	t.Setenv("KUBECONFIG", "/secret/kubeconfig")
	cache := t.TempDir()
	start := time.Now()
	run := pushUnread(t, dir, cache)
	t.Logf("first push in %s", time.Since(start))
	reads := map[string]int{}
	for _, r := range rec.BlobGets() {
		if strings.Contains(r.Path, "/bases/") && r.ResponseBytes > 1<<20 {
			reads[r.Path]++
		}
	}
	if len(reads) != 2 {
		t.Errorf("the push read %d layers of the bases, want 2 (one a platform): %v", len(reads), reads)
	}
	// once unpacked (which says its libc too), once read for the SBOM's catalogue of the base's
	// own npm packages (attest's layer memo, kept by digest in the cache after): not yet one
	// pass for both
	for blob, n := range reads {
		if n != 2 {
			t.Errorf("the push read %s %d times, want twice: unpacked, and catalogued for the SBOM", blob, n)
		}
	}
	var ref string
	for _, img := range run.out.Images {
		if strings.Contains(img.Name, "addon") {
			ref = img.Reference
		}
	}
	if ref == "" {
		t.Fatalf("no image of the composition addon in %+v", run.out.Images)
	}
	for _, c := range []struct {
		platform string
		machine  elf.Machine
		node     string
		triplet  string
	}{
		{"linux/amd64", elf.EM_X86_64, "linux/x64 v18.", "x86_64-linux-gnu"},
		{"linux/arm64", elf.EM_AARCH64, "linux/arm64 v18.", "aarch64-linux-gnu"},
	} {
		t.Run(c.platform, func(t *testing.T) {
			rootfs, _ := harness.Unpacked(t, ref, c.platform)
			modules := filepath.Join(rootfs, "composition", "native-addon", "node_modules")
			addon := filepath.Join(modules, "toa-test-native", "build", "Release", "addon.node")
			f, err := elf.Open(addon)
			if err != nil {
				t.Fatalf("the addon: %v", err)
			}
			f.Close()
			if f.Machine != c.machine {
				t.Errorf("addon.node is for %s, want %s", f.Machine, c.machine)
			}
			marker, err := os.ReadFile(filepath.Join(modules, "toa-test-marker", "marker.txt"))
			if err != nil || !strings.HasPrefix(string(marker), c.node) {
				t.Errorf("the postinstall's marker: %q, %v; want %q...", marker, err, c.node)
			}
			env, _ := os.ReadFile(filepath.Join(modules, "toa-test-marker", "env.txt"))
			for _, secret := range []string{"COSIGN_PASSWORD", "KUBECONFIG"} {
				if strings.Contains(string(env), secret) {
					t.Errorf("the postinstall saw %s", secret)
				}
			}
			if data, err := os.ReadFile(filepath.Join(rootfs, "etc", "toa-run-test")); err != nil || string(data) != "test\n" {
				t.Errorf("/etc/toa-run-test: %q, %v", data, err)
			}
			if _, err := os.Lstat(filepath.Join(rootfs, "etc", "debian_version")); err == nil {
				t.Error("/etc/debian_version, which build.run removed, is in the image")
			}
			// the compiler the lines installed, which node-gyp used: the lines' layer is the
			// image's, as 289's RUN layers were
			if _, err := os.Stat(filepath.Join(rootfs, "usr", "lib", "gcc", c.triplet, "12", "cc1plus")); err != nil {
				t.Errorf("the compiler the lines installed is not in the image: %v", err)
			}
			addonLoads(t, rootfs, c.platform)
		})
	}
	// the postinstall of the `file:` package ran on a copy: the user's checkout is as it was
	if after := tree(t, dir); !slices.Equal(checkout, after) {
		t.Errorf("the push changed the checkout:\nbefore %q\nafter  %q", checkout, after)
	}
	start = time.Now()
	again := pushUnread(t, dir, t.TempDir())
	t.Logf("a push with no change, another cache: %s", time.Since(start))
	for _, img := range again.out.Images {
		if img.Built || img.DepsBuilt {
			t.Errorf("a push with no change built %s", img.Name)
		}
	}
	// a code change: nothing runs in a base, the dependencies image is the registry's
	code := filepath.Join(dir, "components", "native.addon", "load.js")
	os.WriteFile(code, []byte("'use strict'\n\nexports.load = async () => 'changed'\n"), 0o644)
	start = time.Now()
	changed := pushUnread(t, dir, cache)
	t.Logf("a push after a code change: %s", time.Since(start))
	for _, img := range changed.out.Images {
		if img.DepsBuilt {
			t.Errorf("a code change rebuilt the dependencies of %s", img.Name)
		}
	}
	// the same application pushed again from nothing (another registry, another cache), as a
	// kernel that refuses overlayfs in a user namespace has it built (sandbox.NoOverlayEnv: on
	// private copies of the bases), gives the same layers: the scripts' and the lines' work is
	// reproducible, whichever way the base's root is made writable
	t.Setenv(sandbox.NoOverlayEnv, "1")
	otherDir := nativeWithoutCompiler(t, other, compilerLines)
	second := pushUnread(t, otherDir, t.TempDir())
	if !strings.Contains(second.stderr, "runs on a private copy of the base") {
		t.Errorf("the push without an overlay does not say it ran on a copy:\n%s", second.stderr)
	}
	for _, platform := range []string{"linux/amd64", "linux/arm64"} {
		a, b := layerDigests(t, ref, platform), layerDigests(t, second.out.Images[0].Reference, platform)
		if !slices.Equal(a, b) {
			t.Errorf("%s: the second push from nothing, without an overlay, gave other layers:\n%v\n%v", platform, a, b)
		}
	}
}

// TestBuildInBaseRefusals: what the runner lacks fails before anything is pushed, with the
// platform and what to do; a run line for a base without a shell is the user's to fix.
func TestBuildInBaseRefusals(t *testing.T) {
	addr := harness.Registry(t)
	harness.PushDebianBase(t, addr)
	t.Run("no emulator", func(t *testing.T) {
		dir := copyApp(t, "native", addr)
		t.Setenv("TOA_CACHE", t.TempDir())
		t.Setenv(sandbox.BinfmtEnv, t.TempDir())
		code, _, stderr := run(t, dir, "--path", dir, "-k", filepath.Join(dir, "deployment"))
		if code != 1 || !strings.Contains(stderr, "cannot build for linux/arm64 inside its base on this runner: no emulator for arm64 is registered with binfmt_misc") ||
			!strings.Contains(stderr, "sudo apt-get install -y qemu-user-static binfmt-support") {
			t.Errorf("exit %d:\n%s", code, stderr)
		}
		for _, r := range repositories(t, addr) {
			if !strings.HasPrefix(r, "bases/") {
				t.Errorf("the refused push wrote %s", r)
			}
		}
	})
	t.Run("user namespaces refused", func(t *testing.T) {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("no unshare on this machine")
		}
		dir := copyApp(t, "native", addr)
		cmd := exec.Command("unshare", "--user", "--map-root-user", "sh", "-c",
			`echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"`, "sh", binary, "--path", dir, "-k", filepath.Join(dir, "deployment"))
		cmd.Env = append(os.Environ(), "TOA_ENV=", "CI=true", "TOA_CACHE="+t.TempDir())
		code, _, stderr := outcome(t, cmd)
		for _, want := range []string{"cannot build for linux/amd64 inside its base on this runner: it does not let toa-push make user namespaces (user.max_user_namespaces is 0)",
			"run the job as root in its container", "allow user namespaces on the runner", "--scripts-on-runner"} {
			if code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, want 1 and %q:\n%s", code, want, stderr)
			}
		}
	})
	t.Run("no shell", func(t *testing.T) {
		harness.PushTestBase(t, addr)
		dir := copyApp(t, "native", addr)
		file := filepath.Join(dir, "context.toa.yaml")
		data, _ := os.ReadFile(file)
		os.WriteFile(file, bytes.Replace(data, []byte("bases/debian-node:18"), []byte("bases/node:test"), 1), 0o644)
		t.Setenv("TOA_CACHE", t.TempDir())
		code, _, stderr := run(t, dir, "--path", dir, "-k", filepath.Join(dir, "deployment"))
		if code != 2 || !strings.Contains(stderr, "registry.build.run: `echo test > /etc/toa-run-test`: the base for linux/amd64 (glibc) has no /bin/sh to run it") {
			t.Errorf("exit %d:\n%s", code, stderr)
		}
	})
}

// layerDigests are the layers of ref's image for platform.
func layerDigests(t *testing.T, ref, platform string) []string {
	t.Helper()
	idx, m := index(t, ref)
	img := platformImage(t, idx, m, strings.Split(platform, "/")[1])
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
	}
	return digests
}

// repositories lists what the registry at addr holds (its catalog).
func repositories(t *testing.T, addr string) []string {
	t.Helper()
	reg, err := name.NewRegistry(addr, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	repos, err := remote.Catalog(t.Context(), reg)
	if err != nil {
		t.Fatal(err)
	}
	return repos
}

// addonLoads: the image's own node loads the native addon, inside the image's root (rootfs,
// unpacked), for its platform (foreign CPUs under QEMU).
func addonLoads(t *testing.T, rootfs, platform string) {
	t.Helper()
	upper := filepath.Join(t.TempDir(), "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	start := time.Now()
	err := sandbox.Run(t.Context(), sandbox.Command{Root: rootfs, Upper: upper, Platform: platform,
		Args: []string{"node", "-e", "require('toa-test-native'); console.log(process.arch, 'loaded')"},
		Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Dir: "/composition/native-addon", Stdout: &out, Stderr: &out})
	t.Logf("node -e require in the image: %s, %s", time.Since(start), strings.TrimSpace(out.String()))
	if err != nil || !strings.Contains(out.String(), "loaded") {
		t.Errorf("node -e require: %v\n%s", err, out.String())
	}
}

// compilerLines are build.run lines that install Debian's compiler packages the test serves
// (harness.ServeCompilerPackages, its address in TOA_TEST_PACKAGES, a build argument), as a
// user's `apt-get install g++ make` or 289's `apk add g++ make` would: fetched with the base's
// own node, unpacked into the base's root.
const compilerLines = `    arguments: [TOA_TEST_PACKAGES]
    run: |
      for p in cpp-12 gcc-12 g++-12 make; do node -e "fetch(process.argv[1]).then(async r => { if (!r.ok) throw new Error(r.url + ': ' + r.status); process.stdout.write(Buffer.from(await r.arrayBuffer())) })" "$TOA_TEST_PACKAGES/$(uname -m)/$p.tar" > /tmp/package.tar && tar -xf /tmp/package.tar -C / || exit 1; done
      rm /tmp/package.tar
`

// nativeWithoutCompiler is testdata/apps/native for the registry at addr, on the Debian bases
// without their compiler (harness.PushDebianBaseWithoutCompiler), lines before its build.run lines.
func nativeWithoutCompiler(t *testing.T, addr, lines string) string {
	t.Helper()
	dir := copyApp(t, "native", addr)
	ctx := filepath.Join(dir, "context.toa.yaml")
	replaceIn(t, ctx, harness.DebianBaseRef, harness.DebianNoCompilerRef)
	if lines != "" {
		replaceIn(t, ctx, "    run: |\n", lines)
	}
	return dir
}

// TestAddonWithoutCompiler: on a base with node and npm but no compiler (as Toa's default Alpine
// base is), and no build.run line that installs one, the native addon's install fails: exit 1,
// naming the package and where the tools come from, nothing pushed. TestBuildInBase installs the
// compiler with build.run lines on the same base.
func TestAddonWithoutCompiler(t *testing.T) {
	addr := harness.Registry(t)
	harness.PushDebianBaseWithoutCompiler(t, addr)
	dir := nativeWithoutCompiler(t, addr, "")
	replaceIn(t, filepath.Join(dir, "context.toa.yaml"), "platforms: [linux/amd64, linux/arm64]", "platforms: [linux/amd64]")
	t.Setenv("TOA_CACHE", t.TempDir())
	start := time.Now()
	code, _, stderr := run(t, dir, "-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment"))
	t.Logf("exit %d in %s:\n%s", code, time.Since(start), withoutTool(stderr))
	if code != 1 {
		t.Fatalf("toa-push exited %d, want 1:\n%s", code, stderr)
	}
	for _, words := range []string{"toa-test-native@1.0.0 (node_modules/toa-test-native): its install script failed", "a build.run line installs them"} {
		if !strings.Contains(stderr, words) {
			t.Errorf("the error does not say %q:\n%s", words, stderr)
		}
	}
	if repos := repositories(t, addr); slices.ContainsFunc(repos, func(r string) bool { return !strings.HasPrefix(r, "bases/") }) {
		t.Errorf("a failed push wrote to the registry: %v", repos)
	}
}

// withoutTool is s without the lines of node-gyp and npm, for the log.
func withoutTool(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "gyp ERR!") && !strings.Contains(l, "gyp info") && !strings.Contains(l, "npm error") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
