package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// faultyApp writes an application of two compositions whose components have no package.json
// (nothing for npm to install), on a random base in one faulty registry, pushed to another.
func faultyApp(t *testing.T) (dir string, base, target *harness.Faulty) {
	t.Helper()
	base, target = harness.FaultyRegistry(t), harness.FaultyRegistry(t)
	baseRef := harness.PushLayeredBase(t, base.Addr)
	dir = t.TempDir()
	files := map[string]string{
		"context.toa.yaml": fmt.Sprintf("name: faults\nruntime: 1.0.0-alpha.289\nregistry:\n  base: %s\n  platforms: [linux/amd64, linux/arm64]\n"+
			"  build:\n    image: %s\nresources: null\namqp: amqp://rabbitmq\ncompositions:\n  - name: front\n    components: [faults.a]\n  - name: back\n    components: [faults.b]\n",
			target.Addr, baseRef),
		"components/faults.a/manifest.toa.yaml": "operations:\n  get:\n    output: integer\n",
		"components/faults.a/get.js":            "exports.get = async () => 1\n",
		"components/faults.b/manifest.toa.yaml": "operations:\n  get:\n    output: integer\n",
		"components/faults.b/get.js":            "exports.get = async () => 2\n",
	}
	writeAppFiles(t, dir, files)
	return dir, base, target
}

// writeAppFiles writes files into dir and links the stand-in extension packages toa-push asks
// what they deploy (amqp, telemetry) under its node_modules, as testdata/apps link them.
func writeAppFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	modules := filepath.Join(dir, "node_modules", "@toa.io")
	if err := os.MkdirAll(modules, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, pkg := range map[string]string{"bindings.amqp": "amqp", "extensions.telemetry": "telemetry"} {
		target, err := filepath.Abs(filepath.Join("..", "..", "testdata", "packages", "extensions", pkg))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(modules, link)); err != nil {
			t.Fatal(err)
		}
	}
}

// toa-push through faults, as a user runs it: the exit code CI acts on (3 for a transfer that
// stalls past its retries and for --timeout, 1 for a connection that keeps breaking), within a
// bound that --stall-timeout, --retries and --timeout set, words that say what happened, no
// tag on an incomplete image, and a rerun that finishes.
func TestPushThroughFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry")
	}
	cases := []struct {
		name   string
		fault  harness.Fault
		flags  []string
		code   int
		words  []string
		within time.Duration
	}{
		{name: "a stalled upload exits 3", fault: harness.Fault{Match: harness.BlobUpload, Kind: harness.StallRequest, After: 1024},
			flags: []string{"--stall-timeout", "1s", "--retries", "1"}, code: 3,
			words: []string{"no byte moved for 1s", "--stall-timeout"}, within: 30 * time.Second},
		{name: "--timeout exits 3", fault: harness.Fault{Match: harness.BlobUpload, Kind: harness.StallRequest, After: 1024},
			flags: []string{"--timeout", "3s"}, code: 3,
			words: []string{"toa-push ran out of time (--timeout 3s)"}, within: 30 * time.Second},
		{name: "an upload cut every time exits 1 and says so", fault: harness.Fault{Match: harness.BlobUpload, Kind: harness.CutRequest, After: 1024},
			flags: []string{"--retries", "1"}, code: 1,
			words: []string{"broke mid-transfer"}, within: 30 * time.Second},
		{name: "a 429 with Retry-After is waited for", fault: harness.Fault{Match: harness.UploadStart, Times: 1, Kind: harness.Answer,
			Status: 429, RetryAfter: "1"}, code: 0, words: []string{"warning: POST /v2/faults/", "429 Too Many Requests; retrying in 1s"}, within: 60 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _, target := faultyApp(t)
			target.Inject(c.fault)
			t.Setenv("TOA_CACHE", t.TempDir())
			start := time.Now()
			code, _, stderr := run(t, dir, append([]string{"-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment")}, c.flags...)...)
			took := time.Since(start)
			t.Logf("exit %d in %s:\n%s", code, took.Round(time.Millisecond), stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			if took > c.within {
				t.Errorf("took %s, want under %s", took, c.within)
			}
			for _, w := range c.words {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q", w)
				}
			}
			if strings.Contains(stderr, "cannot connect") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("wrong words reached the user")
			}
			if err := harness.Complete(context.Background(), target.Addr); err != nil {
				t.Errorf("a tag points at an incomplete image: %v", err)
			}
			if c.code == 0 {
				return
			}
			target.Heal()
			if code, _, stderr := run(t, dir, "-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment")); code != 0 {
				t.Errorf("the rerun exited %d:\n%s", code, stderr)
			}
		})
	}
}
