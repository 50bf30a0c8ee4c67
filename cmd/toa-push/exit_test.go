package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Each exit code CI acts on, through the binary, with nothing but this process around it: 0 a
// plan against a registry (go-containerregistry's in-memory one), 1 a push whose base registry
// refuses connections, 2 bad input found before any work, 3 a registry that never answers.
func TestExitCodes(t *testing.T) {
	harness.Program(t, "node", nodeInstall)
	hangs := silentRegistry(t)
	refuses := refusingAddr(t)
	for _, c := range []struct {
		name     string
		registry string   // put in the context in place of localhost:5000
		env      []string // KEY=VALUE
		args     []string
		code     int
		stderr   string
		within   time.Duration
	}{
		{name: "done", registry: harness.MemoryRegistry(t), args: []string{"--plan"}, code: 0, stderr: "wrote the kustomization"},
		{name: "failed", registry: refuses, code: 1, stderr: "cannot connect to " + refuses, within: 30 * time.Second},
		{name: "bad input", registry: refuses, env: []string{"SOURCE_DATE_EPOCH=yesterday"}, code: 2, stderr: "SOURCE_DATE_EPOCH: 'yesterday' is not a time"},
		{name: "timed out", registry: hangs, args: []string{"--resolve-timeout", "1s"}, code: 3, stderr: "no answer in time", within: 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyApp(t, "pushed", c.registry)
			if c.registry != refuses && c.registry != hangs {
				harness.PushRandomBase(t, c.registry+"/bases/node:test")
			}
			for _, kv := range c.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			t.Setenv("TOA_CACHE", t.TempDir())
			args := append([]string{"--path", dir, "-k", filepath.Join(dir, "deployment")}, c.args...)
			start := time.Now()
			code, _, stderr := run(t, dir, args...)
			took := time.Since(start)
			if code != c.code || !strings.Contains(stderr, c.stderr) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, c.code, c.stderr, stderr)
			}
			if c.within > 0 && took > c.within {
				t.Errorf("took %v, more than %v", took, c.within)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("a stack trace reached the user:\n%s", stderr)
			}
			_, err := os.Stat(filepath.Join(dir, "deployment"))
			if written := err == nil; written != (c.code == 0) {
				t.Errorf("exit %d, and the kustomization written: %v", code, written)
			}
		})
	}
}

// --plan with the base's registry stopped: a plan made when it was in reach left its digests in
// the cache, and the next plan uses them with a warning that says how old they are (exit 0, the
// kustomization written with the same tags); with an empty cache the plan is printed, nothing
// is written, and the run fails (exit 1).
func TestPlanWithTheBaseRegistryStopped(t *testing.T) {
	harness.Program(t, "node", nodeInstall)
	addr, _, stop := harness.MemoryRegistryWithLog(t)
	harness.PushRandomBase(t, addr+"/bases/node:test")
	dir := copyApp(t, "pushed", addr)
	t.Setenv("TOA_CACHE", t.TempDir())
	plan := func(k string) (int, string, string) {
		return run(t, dir, "--plan", "--path", dir, "-k", k, "--resolve-timeout", "5s")
	}
	online := filepath.Join(t.TempDir(), "deployment")
	if code, _, stderr := plan(online); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	stop()

	offline := filepath.Join(t.TempDir(), "deployment")
	code, stdout, stderr := plan(offline)
	if code != 0 || !strings.Contains(stderr, "cannot connect to "+addr) || !strings.Contains(stderr, "planned from its digests as they were") ||
		!strings.Contains(stdout, "composition-front") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
	a, _ := os.ReadFile(filepath.Join(online, "kustomization.yaml"))
	b, _ := os.ReadFile(filepath.Join(offline, "kustomization.yaml"))
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("planned offline:\n%s\nonline:\n%s", b, a)
	}

	t.Setenv("TOA_CACHE", t.TempDir())
	never := filepath.Join(t.TempDir(), "deployment")
	code, stdout, stderr = plan(never)
	if code != 1 || !strings.Contains(stderr, "the kustomization is not written") || !strings.Contains(stdout, "(unresolved)") {
		t.Errorf("exit %d:\n%s\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat(never); err == nil {
		t.Error("a kustomization without tags was written")
	}
}

// refusingAddr is a loopback address nothing listens on.
func refusingAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentRegistry accepts connections and never answers, for the life of the test.
func silentRegistry(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}
