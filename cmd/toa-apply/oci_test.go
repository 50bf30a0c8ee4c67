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
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/artifact"
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
