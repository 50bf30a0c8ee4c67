package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// HostileMode is what a Hostile registry does wrong.
type HostileMode string

// The modes of a Hostile registry. Its base is one OCI image for linux/amd64 of one uncompressed
// layer that holds a glibc loader (lib/ld-linux-x86-64.so.2): a glibc base.
const (
	// Genuine serves the base as it is.
	Genuine HostileMode = "genuine"
	// EndlessConfig declares a config of 50 GB and sends zeros until the reader goes away.
	EndlessConfig HostileMode = "endless config"
	// BlobRedirectLoop answers every blob GET with a redirect to itself.
	BlobRedirectLoop HostileMode = "blob redirect loop"
	// ManifestRedirectLoop answers every manifest GET or HEAD with a redirect to itself.
	ManifestRedirectLoop HostileMode = "manifest redirect loop"
	// ForgedLayer serves, under the glibc layer's digest, a tar of the same size that holds
	// ld-musl instead: bytes that do not match their digest.
	ForgedLayer HostileMode = "forged layer"
	// ForgedConfig serves, under the config's digest, a config of the same size that says
	// otherwise.
	ForgedConfig HostileMode = "forged config"
	// EndlessManifest answers every manifest GET with zeros, with no Content-Length, until the
	// reader goes away.
	EndlessManifest HostileMode = "endless manifest"
	// RedirectToHTTP speaks HTTPS and redirects every manifest read to the same path on a plain
	// HTTP listener, which serves the genuine manifest.
	RedirectToHTTP HostileMode = "redirect to HTTP"
)

// HostileModes are the modes that do something wrong.
var HostileModes = []HostileMode{EndlessConfig, BlobRedirectLoop, ManifestRedirectLoop, ForgedLayer, ForgedConfig, EndlessManifest, RedirectToHTTP}

// Hostile is a registry on 127.0.0.1 that serves one base, as a registry that is broken or an
// attacker would: for the tests that toa-push and toa-apply bound and check what they read.
type Hostile struct {
	Addr   string // host:port
	Ref    string // the base: Addr/bases/node:test
	CAFile string // the PEM certificate to pass with --ca-file, for RedirectToHTTP; "" otherwise

	ManifestDigest, ConfigDigest, LayerDigest string

	requests atomic.Int64
}

// Requests is how many requests the registry was sent.
func (h *Hostile) Requests() int64 { return h.requests.Load() }

// HostileRegistry serves the base in mode for the life of the test.
func HostileRegistry(t testing.TB, mode HostileMode) *Hostile {
	t.Helper()
	layer := loaderTar(t, "lib/ld-linux-x86-64.so.2")
	forged := loaderTar(t, "lib/ld-musl-x86_64.so.1") // a tar header is 512 bytes whatever the name
	if len(forged) != len(layer) {
		t.Fatalf("the forged layer is %d bytes, the genuine one %d", len(forged), len(layer))
	}
	config := baseConfig("20.0.0", sha256Of(layer))
	h := &Hostile{ConfigDigest: sha256Of(config), LayerDigest: sha256Of(layer)}
	configSize := int64(len(config))
	if mode == EndlessConfig {
		configSize = 50 << 30
	}
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": h.ConfigDigest, "size": configSize},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": h.LayerDigest, "size": len(layer)}},
	})
	h.ManifestDigest = sha256Of(manifest)

	genuine := func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/v2/" || p == "/v2":
			w.WriteHeader(http.StatusOK)
		case p == "/v2/bases/node/manifests/test" || p == "/v2/bases/node/manifests/"+h.ManifestDigest:
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", h.ManifestDigest)
			serve(w, r, manifest)
		case p == "/v2/bases/node/blobs/"+h.ConfigDigest:
			switch mode {
			case EndlessConfig:
				endless(w, r)
			case ForgedConfig:
				serve(w, r, baseConfig("66.6.6", sha256Of(layer)))
			default:
				serve(w, r, config)
			}
		case p == "/v2/bases/node/blobs/"+h.LayerDigest:
			if mode == ForgedLayer {
				serve(w, r, forged)
				return
			}
			serve(w, r, layer)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"errors":[{"code":"NAME_UNKNOWN","message":"not here"}]}`)
		}
	}
	var plain *httptest.Server
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		p := r.URL.Path
		switch {
		case mode == BlobRedirectLoop && strings.Contains(p, "/blobs/sha256:"):
			http.Redirect(w, r, p, http.StatusFound)
		case mode == ManifestRedirectLoop && strings.Contains(p, "/manifests/"):
			http.Redirect(w, r, p, http.StatusFound)
		case mode == EndlessManifest && strings.Contains(p, "/manifests/"):
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			endless(w, r)
		case mode == RedirectToHTTP && strings.Contains(p, "/manifests/"):
			http.Redirect(w, r, plain.URL+p, http.StatusFound)
		default:
			genuine(w, r)
		}
	})
	if mode != RedirectToHTTP {
		s := httptest.NewUnstartedServer(handler)
		s.Listener = loopbackListener(t)
		s.Start()
		t.Cleanup(s.Close)
		h.Addr = strings.TrimPrefix(s.URL, "http://")
		h.Ref = h.Addr + "/bases/node:test"
		return h
	}
	plain = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		genuine(w, r)
	}))
	plain.Listener = loopbackListener(t)
	plain.Start()
	t.Cleanup(plain.Close)
	dir := t.TempDir()
	h.CAFile = filepath.Join(dir, "tls.crt")
	keyFile := filepath.Join(dir, "tls.key")
	if err := selfSigned(h.CAFile, keyFile); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(h.CAFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(handler)
	s.Listener = loopbackListener(t)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	s.StartTLS()
	t.Cleanup(s.Close)
	h.Addr = strings.TrimPrefix(s.URL, "https://")
	h.Ref = h.Addr + "/bases/node:test"
	return h
}

func loopbackListener(t testing.TB) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serve answers a GET with data and a HEAD with its length.
func serve(w http.ResponseWriter, r *http.Request, data []byte) {
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(data)
}

// endless sends zeros, with no Content-Length, until the reader goes away.
func endless(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		return
	}
	chunk := make([]byte, 64<<10)
	for r.Context().Err() == nil {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// loaderTar is a tar of one file, the dynamic loader at path, 4 KiB of it.
func loaderTar(t testing.TB, path string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	body := bytes.Repeat([]byte{0x7f}, 4096)
	if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func baseConfig(node, diffID string) []byte {
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"NODE_VERSION=" + node}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	return cfg
}

func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HostileDockerConfig is a $DOCKER_CONFIG folder whose config.json no credentials file should
// be: what a run given it must say (the file, what it is).
type HostileDockerConfig struct {
	Name  string
	Dir   string   // for DOCKER_CONFIG
	Words []string // what the refusal says
}

// HostileDockerConfigs are config.json as a named pipe (a read would wait for a writer), a link
// to /dev/zero (a read would never end) and a 2 MiB file (over the 1 MiB bound).
func HostileDockerConfigs(t testing.TB) []HostileDockerConfig {
	t.Helper()
	var out []HostileDockerConfig
	for _, c := range []struct {
		name, what string
		make       func(file string) error
	}{
		{"a named pipe", "is a named pipe (FIFO), not a regular file", func(file string) error { return syscall.Mkfifo(file, 0o600) }},
		{"a link to /dev/zero", "is a device, not a regular file", func(file string) error { return os.Symlink("/dev/zero", file) }},
		{"2 MiB", "is 2.0 MiB, more than the 1 MiB a credentials file is read to", func(file string) error {
			return os.WriteFile(file, append([]byte(`{"auths":{}}`), bytes.Repeat([]byte(" "), 2<<20-12)...), 0o600)
		}},
	} {
		dir := t.TempDir()
		file := filepath.Join(dir, "config.json")
		if err := c.make(file); err != nil {
			t.Fatal(err)
		}
		out = append(out, HostileDockerConfig{Name: c.name, Dir: dir, Words: []string{file, c.what, "DOCKER_CONFIG"}})
	}
	return out
}
