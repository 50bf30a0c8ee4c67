package main

import (
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Each exit code CI acts on, through the binary, with nothing but this process around it: 0 a
// plan against a registry (go-containerregistry's in-memory one), 1 a push whose base registry
// refuses connections, 2 bad input found before any work, 3 a registry that never answers.
func TestExitCodes(t *testing.T) {
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
		{name: "done", registry: memoryRegistry(t), args: []string{"--plan"}, code: 0, stderr: "wrote the kustomization"},
		{name: "failed", registry: refuses, code: 1, stderr: "cannot connect to " + refuses, within: 30 * time.Second},
		{name: "bad input", registry: refuses, env: []string{"SOURCE_DATE_EPOCH=yesterday"}, code: 2, stderr: "SOURCE_DATE_EPOCH: 'yesterday' is not a time"},
		{name: "timed out", registry: hangs, args: []string{"--resolve-timeout", "1s"}, code: 3, stderr: "no answer in time", within: 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyApp(t, "pushed", c.registry)
			if c.registry != refuses && c.registry != hangs {
				pushIndex(t, c.registry+"/bases/node:test", "linux/amd64", "linux/arm64")
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

// memoryRegistry serves go-containerregistry's in-memory registry on loopback, for the life of
// the test, and returns its host:port.
func memoryRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushIndex pushes an index of small random images, one per platform, to ref.
func pushIndex(t *testing.T, ref string, platforms ...string) v1.ImageIndex {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		img, err := random.Image(512, 1)
		if err != nil {
			t.Fatal(err)
		}
		platform, err := v1.ParsePlatform(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: platform}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	return idx
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
