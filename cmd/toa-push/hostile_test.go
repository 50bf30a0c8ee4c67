package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// hostileApp writes an application of one composition without a package.json, on the base of a
// hostile registry, for linux/amd64 (the base's one platform), pushed to target.
// run, when given, is its registry.build.run: a line that runs in the base, which is then unpacked.
func hostileApp(t *testing.T, base, target, run string) string {
	t.Helper()
	dir := t.TempDir()
	if run != "" {
		run = "\n    run: " + run
	}
	files := map[string]string{
		"context.toa.yaml": fmt.Sprintf("name: hostile\nruntime: 1.0.0-alpha.289\nregistry:\n  base: %s\n  platforms: [linux/amd64]\n"+
			"  build:\n    image: %s%s\nresources: null\namqp: amqp://rabbitmq\ncompositions:\n  - name: front\n    components: [hostile.a]\n", target, base, run),
		"components/hostile.a/manifest.toa.yaml": "operations:\n  get:\n    output: integer\n",
		"components/hostile.a/get.js":            "exports.get = async () => 1\n",
	}
	writeAppFiles(t, dir, files)
	return dir
}

// memoryCap is the address space toa-push runs in (ulimit -v): a run that reads what a hostile
// registry declares fails inside it instead of taking the machine's memory. 3 GiB, not 1: Go's
// heap reservations and node's under it reach 1 GiB of address space in a push that builds.
const memoryCap = 3 << 30

// runCapped runs toa-push in dir under memoryCap and returns its exit code, its stderr, how long
// it took and its peak resident memory (the largest of toa-push and what it waited for; peakLimit
// is files_test.go's). A run past two minutes is killed.
func runCapped(t *testing.T, dir string, env []string, args ...string) (code int, stderr string, took time.Duration, peak int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, memoryCap>>10)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// through files_test.go's launcher: a child forked from the test process would be charged
	// the test process's own peak
	peakFile := filepath.Join(t.TempDir(), "peak")
	cmd := exec.CommandContext(ctx, self, append([]string{"sh", "-c", script, binary}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "TOA_ENV=", "CI=true", launcherVariable+"="+peakFile), env...)
	start := time.Now()
	code, _, stderr = outcome(t, cmd)
	took = time.Since(start)
	data, err := os.ReadFile(peakFile)
	if err != nil {
		t.Fatalf("the launcher measured nothing: %v\n%s", err, stderr)
	}
	fmt.Sscan(string(data), &peak)
	return code, stderr, took, peak
}

// toa-push and toa-push --plan against a registry that sends what no registry should: an endless
// config a manifest declares as 50 GB, blobs or manifests that redirect to themselves, bytes that
// are not their digest, a redirect from HTTPS to plain HTTP. Each run exits 1 (the work failed,
// not the user's input) within seconds, says which registry and what was wrong, stays far under
// the memory cap, and a forged layer leaves no trace in the libc cache.
func TestHostileRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("runs toa-push against a hostile registry, with node for the extensions' bridge")
	}
	cases := []struct {
		mode harness.HostileMode
		plan bool
		run  string // registry.build.run
		code int
		// words the error has, beyond the registry's address; ADDR stands for it
		words []string
	}{
		{harness.EndlessConfig, true, "", 1, []string{"declares a config of 53687091200 bytes, more than toa-push reads (8 MiB)"}},
		{harness.EndlessConfig, false, "", 1, []string{"declares a config of 53687091200 bytes, more than toa-push reads (8 MiB)"}},
		{harness.BlobRedirectLoop, true, "", 1, []string{"ADDR answered GET /v2/bases/node/blobs/sha256:", "with a redirect more than 10 times", "a redirect loop"}},
		{harness.BlobRedirectLoop, false, "", 1, []string{"ADDR answered GET /v2/bases/node/blobs/sha256:", "with a redirect more than 10 times", "a redirect loop"}},
		{harness.ManifestRedirectLoop, true, "", 1, []string{"ADDR answered GET /v2/bases/node/manifests/test with a redirect more than 10 times"}},
		{harness.ManifestRedirectLoop, false, "", 1, []string{"ADDR answered GET /v2/bases/node/manifests/test with a redirect more than 10 times"}},
		{harness.ForgedConfig, true, "", 1, []string{"from ADDR is not what its digest says", "forged"}},
		{harness.ForgedConfig, false, "", 1, []string{"from ADDR is not what its digest says", "forged"}},
		{harness.ForgedLayer, true, "", 0, nil}, // a plan reads no layer
		{harness.ForgedLayer, false, "", 1, []string{"look for the libc of the base", "from ADDR is not what its digest says", "forged"}},
		// a base the work will unpack is read once, unpacked; the unpacker stops at the tar's end,
		// and reads the rest of the blob for its digest before it keeps the root
		{harness.ForgedLayer, false, "echo test > /etc/toa-run-test", 1, []string{"unpack the base", "from ADDR is not what its digest says", "forged"}},
		{harness.RedirectToHTTP, true, "", 1, []string{"ADDR answered GET /v2/bases/node/manifests/test with a redirect from HTTPS to plain HTTP", "--insecure"}},
		{harness.RedirectToHTTP, false, "", 1, []string{"ADDR answered GET /v2/bases/node/manifests/test with a redirect from HTTPS to plain HTTP", "--insecure"}},
	}
	for _, c := range cases {
		name := string(c.mode)
		if c.plan {
			name += " --plan"
		}
		if c.run != "" {
			name += ", build.run"
		}
		t.Run(name, func(t *testing.T) {
			hostile := harness.HostileRegistry(t, c.mode)
			target := harness.MemoryRegistry(t)
			dir := hostileApp(t, hostile.Ref, target, c.run)
			cache := t.TempDir()
			args := []string{"--path", dir, "-k", filepath.Join(dir, "deployment"), "--stall-timeout", "10s", "--resolve-timeout", "20s", "--timeout", "60s"}
			if c.plan {
				args = append(args, "--plan")
			}
			if hostile.CAFile != "" {
				args = append(args, "--ca-file", hostile.CAFile)
			}
			code, stderr, took, peak := runCapped(t, dir, []string{"TOA_CACHE=" + cache}, args...)
			t.Logf("%s: exit %d in %s, peak %d MiB, %d requests to the registry:\n%s", name, code, took.Round(time.Millisecond), peak>>20, hostile.Requests(), stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			for _, w := range c.words {
				if w = strings.ReplaceAll(w, "ADDR", hostile.Addr); !strings.Contains(stderr, w) {
					t.Errorf("the error does not say %q", w)
				}
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("a stack trace reached the user")
			}
			if took > 30*time.Second {
				t.Errorf("took %s", took)
			}
			if peak > peakLimit {
				t.Errorf("peak resident memory %d MiB, over %d MiB", peak>>20, peakLimit>>20)
			}
			if n := hostile.Requests(); n > 100 {
				t.Errorf("%d requests to the registry", n)
			}
			// nothing a hostile registry sent is kept as what toa-push learnt of the base
			libc := filepath.Join(cache, "libc", strings.ReplaceAll(hostile.ManifestDigest, ":", "-"))
			if data, err := os.ReadFile(libc); err == nil {
				t.Errorf("the libc cache says %q of the base after a %s", data, c.mode)
			}
			if roots, _ := filepath.Glob(filepath.Join(cache, "bases", "roots", "*")); len(roots) > 0 {
				t.Errorf("an unpacked base is kept after a %s: %v", c.mode, roots)
			}
		})
	}
}

// The genuine base of the hostile registry, as a check of the test itself: the push gets past
// the base (its libc found and cached as glibc), so that what fails above fails for what the
// registry did wrong.
func TestHostileRegistryGenuine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs toa-push against a registry, with node for the extensions' bridge")
	}
	hostile := harness.HostileRegistry(t, harness.Genuine)
	target := harness.MemoryRegistry(t)
	dir := hostileApp(t, hostile.Ref, target, "")
	cache := t.TempDir()
	code, stderr, took, peak := runCapped(t, dir, []string{"TOA_CACHE=" + cache}, "--path", dir, "-k", filepath.Join(dir, "deployment"), "--timeout", "120s")
	t.Logf("genuine: exit %d in %s, peak %d MiB:\n%s", code, took.Round(time.Millisecond), peak>>20, stderr)
	libc := filepath.Join(cache, "libc", strings.ReplaceAll(hostile.ManifestDigest, ":", "-"))
	if data, err := os.ReadFile(libc); err != nil || string(data) != "glibc" {
		t.Errorf("the libc cache of the genuine base: %q, %v", data, err)
	}
}
