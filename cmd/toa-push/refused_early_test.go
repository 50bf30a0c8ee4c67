package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// TestRefusedBeforeInstall: an application whose only work in a base is a dependency's install
// script (its lockfile says hasInstallScript), or a build.run line, for arm64 on a runner with no
// emulator registered, is refused before npm installs anything, before the registry is sent a
// blob and before a layer of a base is read (the emulator and user namespaces are checked before
// the bases unpack), in seconds.
func TestRefusedBeforeInstall(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(t *testing.T, dir string) // leaves the one piece of work in a base
		what string                         // the work the refusal names
	}{
		{"install script", func(t *testing.T, dir string) {
			replaceIn(t, filepath.Join(dir, "context.toa.yaml"), "    run: |\n      echo test > /etc/toa-run-test\n      rm /etc/debian_version\n", "")
		}, "the install scripts of toa-test-marker"},
		{"build.run", func(t *testing.T, dir string) {
			replaceIn(t, filepath.Join(dir, "components", "native.addon", "package-lock.json"), "      \"hasInstallScript\": true,\n", "")
		}, "`echo test > /etc/toa-run-test`"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, rec := harness.RegistryWithLog(t)
			harness.PushDebianBase(t, addr)
			dir := copyApp(t, "native", addr)
			c.edit(t, dir)
			// npm on the PATH writes down what it was asked before it does it
			realNpm, err := exec.LookPath("npm")
			if err != nil {
				t.Skip("no npm")
			}
			bin, calls := t.TempDir(), filepath.Join(t.TempDir(), "npm-calls")
			os.WriteFile(filepath.Join(bin, "npm"), []byte("#!/bin/sh\necho \"$*\" >> "+calls+"\nexec "+realNpm+" \"$@\"\n"), 0o755)
			t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			t.Setenv("TOA_CACHE", t.TempDir())
			t.Setenv(sandbox.BinfmtEnv, t.TempDir())
			rec.Reset()
			start := time.Now()
			code, _, stderr := run(t, dir, "--path", dir, "-k", filepath.Join(dir, "deployment"))
			took := time.Since(start)
			t.Logf("refused in %s:\n%s", took, stderr)
			if code != 1 || !strings.Contains(stderr, c.what+": cannot build for linux/arm64 inside its base on this runner: no emulator for arm64 is registered with binfmt_misc") ||
				!strings.Contains(stderr, "sudo apt-get install -y qemu-user-static binfmt-support") {
				t.Errorf("exit %d:\n%s", code, stderr)
			}
			if n := len(rec.BlobUploads()); n != 0 {
				t.Errorf("the refused push uploaded %d blobs", n)
			}
			for _, r := range rec.BlobGets() {
				if strings.Contains(r.Path, "/bases/") && r.ResponseBytes > 1<<20 {
					t.Errorf("the refused push read a layer of a base first: %s (%d bytes)", r.Path, r.ResponseBytes)
				}
			}
			asked, _ := os.ReadFile(calls)
			for _, line := range strings.Split(string(asked), "\n") {
				if f := strings.Fields(line); len(f) > 0 && (f[0] == "ci" || f[0] == "install" || f[0] == "rebuild") {
					t.Errorf("npm was run before the refusal: npm %s", line)
				}
			}
			if took > 60*time.Second {
				t.Errorf("the refusal took %s", took)
			}
		})
	}
}

// replaceIn replaces old, which must be there, with new in file.
func replaceIn(t *testing.T, file, old, new string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s holds no %q", file, old)
	}
	if err := os.WriteFile(file, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}
