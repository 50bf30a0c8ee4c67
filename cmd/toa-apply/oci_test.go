package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/artifact"
	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// hostileArtifact is an image manifest of Flux's types over a layer of any bytes: what a
// registry an attacker writes to could serve.
func hostileArtifact(t *testing.T, layer []byte) v1.Image {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), artifact.MediaTypeConfig)
	img, err := mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(layer, artifact.MediaTypeContent)})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func tgz(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			// zeros: a large file is a small layer
			for left := h.Size; left > 0; left -= 1 << 20 {
				tw.Write(make([]byte, min(left, 1<<20)))
			}
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// An artifact made to escape the folder it is unpacked into, to plant a link, or to fill the
// disk or the memory is refused: toa-apply, under a memory cap, exits 1 within seconds, saying
// what the artifact holds, and writes nothing outside its temporary folder.
func TestHostileArtifacts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real registry")
	}
	bin := binary(t)
	addr := harness.Registry(t)
	kustomization := tar.Header{Typeflag: tar.TypeReg, Name: "kustomization.yaml", Size: 20}
	for i, c := range []struct {
		name  string
		layer []byte
		want  string
	}{
		{"a path up", tgz(t, kustomization, tar.Header{Typeflag: tar.TypeReg, Name: "../../escaped.yaml", Size: 4}), `the entry "../../escaped.yaml" leads outside the folder`},
		{"an absolute path", tgz(t, tar.Header{Typeflag: tar.TypeReg, Name: "/tmp/escaped.yaml", Size: 4}), `the entry "/tmp/escaped.yaml" leads outside the folder`},
		{"a symbolic link", tgz(t, tar.Header{Typeflag: tar.TypeSymlink, Name: "kustomization.yaml", Linkname: "/etc/shadow"}), `kustomization.yaml is a link (to "/etc/shadow")`},
		{"a link, then a file through it", tgz(t, tar.Header{Typeflag: tar.TypeSymlink, Name: "d", Linkname: "/tmp"}, tar.Header{Typeflag: tar.TypeReg, Name: "d/escaped.yaml", Size: 4}), "d is a link"},
		{"a hard link", tgz(t, tar.Header{Typeflag: tar.TypeLink, Name: "kustomization.yaml", Linkname: "/etc/passwd"}), "is a link"},
		{"a gzip bomb", tgz(t, tar.Header{Typeflag: tar.TypeReg, Name: "big.yaml", Size: 1 << 30}), "unpacks to more than 268435456 bytes"},
		{"not gzip", []byte("not a tar at all"), "its layer is not gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref, err := name.ParseReference(addr + "/hostile/deploy:" + strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(ref, hostileArtifact(t, c.layer)); err != nil {
				t.Fatal(err)
			}
			tmp := t.TempDir()
			start := time.Now()
			// 512 MiB of data (the heap; an address-space cap stops the Go runtime itself): the
			// bomb unpacks to twice as much, so toa-apply must refuse it rather than read it
			cmd := exec.Command("prlimit", "--data=536870912", "--", bin, "oci://"+ref.String(), "--render")
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			took := time.Since(start)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
				t.Errorf("exit %v after %s\nstdout %s\nstderr %s\nwant exit 1 and %q", err, took, stdout.String(), stderr.String(), c.want)
			}
			if took > 20*time.Second {
				t.Errorf("took %s", took)
			}
			for _, f := range []string{filepath.Join(tmp, "escaped.yaml"), "/tmp/escaped.yaml"} {
				if _, err := os.Lstat(f); err == nil {
					t.Errorf("%s was written", f)
				}
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("left behind in TMPDIR: %v", left)
			}
		})
	}
}

// Flags that go with an artifact only are refused with a folder.
func TestVerifyKeyNeedsAnArtifact(t *testing.T) {
	c := &applyCommand{Dir: t.TempDir(), Render: true, HistoryMax: 10, ociFlags: ociFlags{VerifyKey: "cosign.pub"}}
	err := c.Run(t.Context(), nil)
	if err == nil || !strings.Contains(err.Error(), "--verify-key checks an artifact: give oci://REF") {
		t.Errorf("got %v", err)
	}
}

// toa-apply oci://REF against a registry that sends what no registry should, the hostile
// registry of issue 26 that toa-push's TestHostileRegistry runs against: a manifest that
// redirects to itself, a redirect from HTTPS to plain HTTP, a manifest that never ends. The pull
// goes through toa-push's registry client, so each is refused as toa-push refuses it: exit 1 (the
// work failed, not the user's input) in seconds, not at --timeout, naming the registry and what it
// did, in bounded memory and requests, with nothing left in TMPDIR. The genuine registry, and the
// redirect to HTTP with --insecure, get past the transport to the manifest, which is an image's,
// not Flux's: what fails above fails for what the registry did.
func TestHostileRegistry(t *testing.T) {
	cases := []struct {
		name     string
		mode     harness.HostileMode
		insecure bool
		words    []string // ADDR stands for the registry's address
	}{
		{"a manifest redirect loop", harness.ManifestRedirectLoop, false,
			[]string{"ADDR answered GET /v2/bases/node/manifests/test with a redirect more than 10 times", "a redirect loop"}},
		{"a redirect from HTTPS to HTTP", harness.RedirectToHTTP, false,
			[]string{"ADDR answered GET /v2/bases/node/manifests/test with a redirect from HTTPS to plain HTTP",
				"toa-apply does not leave HTTPS for plain HTTP", "pass --insecure to allow it"}},
		{"an endless manifest", harness.EndlessManifest, false,
			[]string{"the manifest /v2/bases/node/manifests/test from ADDR is longer, more than toa-apply reads (4 MiB)"}},
		{"genuine", harness.Genuine, false, []string{"ADDR/bases/node:test is not a Flux artifact: its config is a application/vnd.oci.image.config.v1+json"}},
		{"a redirect from HTTPS to HTTP, --insecure", harness.RedirectToHTTP, true, []string{"ADDR/bases/node:test is not a Flux artifact"}},
	}
	binary(t) // built before HOME and TMPDIR change: go build would start a cache of its own
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hostile := harness.HostileRegistry(t, c.mode)
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			t.Setenv("HOME", t.TempDir())
			t.Setenv("DOCKER_CONFIG", t.TempDir())
			args := []string{"oci://" + hostile.Ref, "--render", "--timeout", "5m"}
			if hostile.CAFile != "" {
				args = append(args, "--ca-file", hostile.CAFile)
			}
			if c.insecure {
				args = append(args, "--insecure")
			}
			var words []string
			for _, w := range c.words {
				words = append(words, strings.ReplaceAll(w, "ADDR", hostile.Addr))
			}
			r := toaApplyCapped(t, args...)
			r.check(t, c.name, 1, 20*time.Second, words...)
			t.Logf("%d requests to the registry", hostile.Requests())
			if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
				t.Errorf("a stack trace reached the user")
			}
			if r.stdout != "" {
				t.Errorf("rendered %q", r.stdout)
			}
			if n := hostile.Requests(); n > 30 {
				t.Errorf("%d requests to the registry", n)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("left behind in TMPDIR: %v", left)
			}
		})
	}
}

// A --ca-file that is a named pipe or a link to /dev/zero is refused by name before any
// connection, as toa-push refuses it (fsys.ReadFile): exit 2 at once, not a read that waits for a
// writer or never ends.
func TestCAFileBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.pem")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	addr := harness.MemoryRegistry(t)
	binary(t)
	for _, c := range []struct {
		name, file string
		words      []string
	}{
		{"a named pipe", fifo, []string{"--ca-file " + fifo, "is a named pipe (FIFO), not a regular file"}},
		{"a link to /dev/zero", zero, []string{"--ca-file " + zero, "links to /dev/zero, which is a device, not a regular file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := toaApplyCapped(t, "oci://"+addr+"/app/deployment:1", "--render", "--timeout", "5m", "--ca-file", c.file)
			r.check(t, c.name, 2, 10*time.Second, c.words...)
		})
	}
}
