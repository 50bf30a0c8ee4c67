package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	toaregistry "github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
)

var files = map[string][]byte{
	"kustomization.yaml": []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [deployment.yaml]\n" +
		"images:\n- name: REG/shop/composition-front\n  digest: sha256:DIGEST\n"),
	"deployment.yaml": []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: composition-front}\n"),
}

// New writes what `flux push artifact` writes: OCI manifest, Flux's config and layer types, the
// three annotations, a config dated by the metadata; the same files give the same digest.
func TestNewIsFluxsFormatAndReproducible(t *testing.T) {
	meta := Metadata{Source: "https://git.example/shop", Revision: "main@sha1:abc", Created: time.Unix(1700000000, 0)}
	img, err := New(files, meta)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != MediaTypeConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeContent {
		t.Errorf("manifest %+v", m)
	}
	want := map[string]string{AnnotationSource: meta.Source, AnnotationRevision: meta.Revision, AnnotationCreated: "2023-11-14T22:13:20Z"}
	for k, v := range want {
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, m.Annotations[k], v)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// go-containerregistry since v0.21.6 (which flux2 v2.9.5 builds with) leaves an artifact's
	// config without the layers' diff IDs: Flux's client writes the same bytes
	if !cfg.Created.Equal(meta.Created) || len(cfg.RootFS.DiffIDs) != 0 {
		t.Errorf("config %+v", cfg)
	}
	again, err := New(map[string][]byte{"deployment.yaml": files["deployment.yaml"], "kustomization.yaml": files["kustomization.yaml"]}, meta)
	if err != nil {
		t.Fatal(err)
	}
	if d1, d2 := digestOf(t, img), digestOf(t, again); d1 != d2 {
		t.Errorf("the same files gave %s and %s", d1, d2)
	}
	changed, _ := New(map[string][]byte{"kustomization.yaml": []byte("kind: Kustomization\n")}, meta)
	if digestOf(t, changed) == digestOf(t, img) {
		t.Error("other files gave the same digest")
	}
	if !IsFlux(img) {
		t.Error("IsFlux says no")
	}
}

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// tarOf makes a tar+gzip of hand-made entries, hostile ones included.
func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = 3
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestUnpack(t *testing.T) {
	small := Limits{Manifest: 1 << 20, Layer: 1 << 20, Unpacked: 100, Files: 3}
	for _, c := range []struct {
		name    string
		tgz     []byte
		limits  Limits
		wantErr string
	}{
		{"own tar", mustTar(t, files), DefaultLimits, ""},
		{"flux's root entry and a folder", tarOf(t, tar.Header{Typeflag: tar.TypeDir, Name: "."}, tar.Header{Typeflag: tar.TypeDir, Name: "base/"},
			tar.Header{Typeflag: tar.TypeReg, Name: "base/kustomization.yaml"}), DefaultLimits, ""},
		{"a path up", tarOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "../evil.yaml"}), DefaultLimits, `"../evil.yaml" leads outside`},
		{"a path up inside", tarOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "a/../../evil.yaml"}), DefaultLimits, "leads outside"},
		{"an absolute path", tarOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "/etc/evil"}), DefaultLimits, "leads outside"},
		{"a symlink", tarOf(t, tar.Header{Typeflag: tar.TypeSymlink, Name: "k.yaml", Linkname: "/etc/passwd"}), DefaultLimits, `k.yaml is a link (to "/etc/passwd")`},
		{"a hard link", tarOf(t, tar.Header{Typeflag: tar.TypeLink, Name: "k.yaml", Linkname: "x"}), DefaultLimits, "is a link"},
		{"a device", tarOf(t, tar.Header{Typeflag: tar.TypeChar, Name: "tty"}), DefaultLimits, "not a file or a folder"},
		{"twice the same file", tarOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "a"}, tar.Header{Typeflag: tar.TypeReg, Name: "./a"}), DefaultLimits, "file exists"},
		{"too many files", tarOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "a"}, tar.Header{Typeflag: tar.TypeReg, Name: "b"},
			tar.Header{Typeflag: tar.TypeReg, Name: "c"}, tar.Header{Typeflag: tar.TypeReg, Name: "d"}), small, "more than 3 files"},
		{"too many bytes", tarOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "a", Size: 101}), small, "more than 100 bytes"},
		{"not gzip", []byte("plain"), DefaultLimits, "not gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			err := Unpack(c.tgz, dir, "the artifact", c.limits)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want %q", err, c.wantErr)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "evil.yaml")); err == nil {
				t.Error("a file was written outside the folder")
			}
		})
	}
}

func mustTar(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	tgz, err := Tar(files, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return tgz
}

// a test registry (go-containerregistry's, in memory) and a key pair
type fixture struct {
	host string
	reg  Registry
	key  *ecdsa.PrivateKey
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(toaregistry.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{host: strings.TrimPrefix(srv.URL, "http://"), reg: reg, key: key}
}

func (f *fixture) push(t *testing.T, ref string, img v1.Image) name.Digest {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return r.Context().Digest(digestOf(t, img))
}

// sign writes cosign's signature image of d, signed by key.
func (f *fixture) sign(t *testing.T, d name.Digest, key *ecdsa.PrivateKey) {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{"critical": map[string]any{"identity": map[string]string{"docker-reference": d.Context().Name()},
		"image": map[string]string{"docker-manifest-digest": d.DigestStr()}, "type": "cosign container image signature"}, "optional": nil})
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: static.NewLayer(payload, sign.MediaTypeSimpleSigning), Annotations: map[string]string{sign.AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}})
	if err != nil {
		t.Fatal(err)
	}
	tag := d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + ".sig")
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) publicKeyFile(t *testing.T) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&f.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// Fetch pulls, verifies the artifact and each pinned image against the key, and unpacks; an
// unsigned or mis-signed one is refused, naming it, and nothing is unpacked for an artifact.
func TestFetchVerifies(t *testing.T) {
	f := newFixture(t)
	front := f.push(t, f.host+"/shop/composition-front:1", empty.Image)
	back := f.push(t, f.host+"/shop/composition-back:1", mutate.MediaType(empty.Image, types.OCIManifestSchema1))
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n" +
		"- name: " + front.Context().Name() + "\n  digest: " + front.DigestStr() + "\n" +
		"- name: " + back.Context().Name() + "\n  digest: " + back.DigestStr() + "\n"
	art, err := New(map[string][]byte{"kustomization.yaml": []byte(kustomization)}, Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	ad := f.push(t, f.host+"/shop/deploy:production", art)
	pubFile := f.publicKeyFile(t)
	pub, err := sign.ReadPublicKey(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() (*Fetched, string, error) {
		dir := filepath.Join(t.TempDir(), "k")
		got, err := Fetch(context.Background(), "oci://"+f.host+"/shop/deploy:production", dir, f.reg, pub, DefaultLimits)
		return got, dir, err
	}
	var unsigned *Unsigned
	if _, dir, err := fetch(); !errors.As(err, &unsigned) || !strings.Contains(err.Error(), "the artifact "+ad.String()+" is not signed") {
		t.Errorf("an unsigned artifact: %v", err)
	} else if _, err := os.Stat(dir); err == nil {
		t.Error("an unsigned artifact was unpacked")
	}
	f.sign(t, ad, f.key)
	f.sign(t, front, f.key)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.sign(t, back, other)
	if _, _, err := fetch(); !errors.As(err, &unsigned) || !strings.Contains(err.Error(), "the image "+back.String()+" is not signed by the key") {
		t.Errorf("an image signed by another key: %v", err)
	}
	f.sign(t, back, f.key) // a second signature, by the key
	got, dir, err := fetch()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Verified) != 3 || got.Reference != ad.String() {
		t.Errorf("fetched %+v", got)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml")); err != nil || string(data) != kustomization {
		t.Errorf("unpacked %q, %v", data, err)
	}
	// by digest: the same; by a digest the registry does not hold: refused
	if _, err := Fetch(context.Background(), "oci://"+ad.String(), filepath.Join(t.TempDir(), "k"), f.reg, pub, DefaultLimits); err != nil {
		t.Errorf("by digest: %v", err)
	}
	wrong := ad.Context().Digest("sha256:" + strings.Repeat("0", 64))
	if _, err := Fetch(context.Background(), "oci://"+wrong.String(), filepath.Join(t.TempDir(), "k"), f.reg, nil, DefaultLimits); err == nil {
		t.Error("a digest the registry lacks was fetched")
	}
}

// What is not a Flux artifact, or is too large, is refused before its layer is read.
func TestPullRefuses(t *testing.T) {
	f := newFixture(t)
	f.push(t, f.host+"/shop/image:1", empty.Image)
	art, _ := New(files, Metadata{})
	f.push(t, f.host+"/shop/deploy:1", art)
	for _, c := range []struct {
		ref     string
		limits  Limits
		wantErr string
	}{
		{f.host + "/shop/image:1", DefaultLimits, "is not a Flux artifact: its config is a application/vnd.docker.container.image.v1+json"},
		{f.host + "/shop/deploy:1", Limits{Manifest: 10, Layer: 1 << 20}, "its manifest is"},
		{f.host + "/shop/deploy:1", Limits{Manifest: 1 << 20, Layer: 10}, "its layer is"},
		{f.host + "/shop/missing:1", DefaultLimits, "the artifact " + f.host + "/shop/missing:1: not found (404 Not Found)"},
		{"Not A Reference", DefaultLimits, "is not an artifact's reference"},
	} {
		ref, err := f.reg.ParseReference(c.ref)
		if err == nil {
			_, err = f.reg.Pull(context.Background(), ref, c.limits)
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: %v, want %q", c.ref, err, c.wantErr)
		}
	}
}

// A pull's failures are registry.Errors, told apart by their kind rather than by the words of
// the registry: a registry that asks for credentials none were found for says so and what to do
// (a Credentials error, exit 1), one that answers 404 is not found.
func TestPullErrorsAreRegistryErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	f := newFixture(t)
	for _, c := range []struct {
		ref   string
		kind  toaregistry.Kind
		words string
	}{
		{host + "/shop/deploy:1", toaregistry.Credentials, host + " asks for credentials (401) and none were found for it"},
		{f.host + "/shop/missing:1", toaregistry.Answered, "not found (404 Not Found)"},
	} {
		ref, err := f.reg.ParseReference("oci://" + c.ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.reg.Pull(context.Background(), ref, DefaultLimits)
		var rerr *toaregistry.Error
		if !errors.As(err, &rerr) || rerr.Kind != c.kind || !strings.Contains(err.Error(), c.words) || fault.ClassOf(err) != fault.ClassFailed {
			t.Errorf("%s: %v (%T), want a registry.Error of kind %v saying %q", c.ref, err, err, c.kind, c.words)
		}
	}
}
