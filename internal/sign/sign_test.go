package sign

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

func newKey(t *testing.T, curve elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sec1PEM(t *testing.T, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func pkcs8PEM(t *testing.T, k any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestParseKey(t *testing.T) {
	k := newKey(t, elliptic.P256())
	params := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}})
	for name, data := range map[string][]byte{
		"SEC 1":                     sec1PEM(t, k),
		"PKCS 8":                    pkcs8PEM(t, k),
		"with openssl's parameters": append(params, sec1PEM(t, k)...),
	} {
		s, err := ParseKey(data, "key.pem", nil)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !s.key.Equal(k) {
			t.Errorf("%s: another key was read", name)
		}
	}
	for name, data := range map[string][]byte{
		"P-384":     sec1PEM(t, newKey(t, elliptic.P384())),
		"encrypted": pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: []byte("x")}),
		"public":    pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("x")}),
		"not PEM":   []byte("hello"),
	} {
		_, err := ParseKey(data, "key.pem", nil)
		var in *fault.Input
		if !errors.As(err, &in) || in.File != "key.pem" || in.Hint == "" {
			t.Errorf("%s: got %v, want bad input naming the file, with a hint", name, err)
		}
	}
}

func TestSignatureImage(t *testing.T) {
	k := newKey(t, elliptic.P256())
	s, err := ParseKey(sec1PEM(t, k), "key.pem", nil)
	if err != nil {
		t.Fatal(err)
	}
	repo, digest := "127.0.0.1:5000/shop/composition-front", "sha256:"+strings.Repeat("ab", 32)
	sigs, err := s.Image(nil, repo, digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(sigs, &k.PublicKey, digest); err != nil {
		t.Error(err)
	}
	if err := Verify(sigs, &k.PublicKey, "sha256:"+strings.Repeat("cd", 32)); err == nil {
		t.Error("the signature verifies for another digest")
	}
	if err := Verify(sigs, &newKey(t, elliptic.P256()).PublicKey, digest); err == nil {
		t.Error("the signature verifies with another key")
	}
	m, err := sigs.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 ||
		m.Layers[0].MediaType != MediaTypeSimpleSigning || m.Layers[0].Annotations[AnnotationSignature] == "" {
		t.Errorf("not cosign's signature image: %+v", m)
	}
	// the payload as cosign writes it (sigstore/sigstore payload.Cosign.MarshalJSON)
	layers, _ := sigs.Layers()
	rc, _ := layers[0].Compressed()
	var payload map[string]any
	if err := json.NewDecoder(rc).Decode(&payload); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	want := map[string]any{"critical": map[string]any{"identity": map[string]any{"docker-reference": repo},
		"image": map[string]any{"docker-manifest-digest": digest}, "type": "cosign container image signature"}, "optional": nil}
	if got, _ := json.Marshal(payload); string(got) != mustJSON(t, want) {
		t.Errorf("payload %s", got)
	}
	// deterministic: the same digest and key, the same signature image
	again, _ := s.Image(nil, repo, digest)
	if d1, d2 := digestOf(t, sigs), digestOf(t, again); d1 != d2 {
		t.Errorf("two signature images for one digest: %s, %s", d1, d2)
	}
	// signed already: nothing to write
	if same, err := s.Image(sigs, repo, digest); err != nil || same != nil {
		t.Errorf("signing again gave %v, %v; want nothing to write", same, err)
	}
	// another signer's image keeps its layers
	other, _ := ParseKey(sec1PEM(t, newKey(t, elliptic.P256())), "other.pem", nil)
	both, err := other.Image(sigs, repo, digest)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := both.Manifest(); len(m.Layers) != 2 {
		t.Errorf("%d layers, want both signatures", len(m.Layers))
	}
	if err := Verify(both, &k.PublicKey, digest); err != nil {
		t.Error(err)
	}
}

func TestSignatureTag(t *testing.T) {
	repo, _ := name.NewRepository("127.0.0.1:5000/shop/front", name.Insecure)
	tag := Tag(repo, "sha256:"+strings.Repeat("ab", 32))
	if tag.String() != "127.0.0.1:5000/shop/front:sha256-"+strings.Repeat("ab", 32)+".sig" || !IsTag(tag.String()) {
		t.Errorf("got %v", tag)
	}
}

func mustJSON(t *testing.T, v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func digestOf(t *testing.T, img v1.Image) string {
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func TestLoadKey(t *testing.T) {
	k := newKey(t, elliptic.P256())
	file := t.TempDir() + "/key.pem"
	if err := os.WriteFile(file, sec1PEM(t, k), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CI_KEY": string(pkcs8PEM(t, k))}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, spec := range []string{file, "env://CI_KEY"} {
		s, err := LoadKey(spec, getenv)
		if err != nil || !s.key.Equal(k) {
			t.Errorf("LoadKey(%q): %v, %v", spec, s, err)
		}
	}
	if s, err := LoadKey("", getenv); s != nil || err != nil {
		t.Errorf("no key given gave %v, %v", s, err)
	}
	env[KeyEnv] = string(sec1PEM(t, k))
	if s, err := LoadKey("", getenv); err != nil || !s.key.Equal(k) {
		t.Errorf("%s: %v, %v", KeyEnv, s, err)
	}
	for _, spec := range []string{t.TempDir() + "/missing.pem", "env://UNSET"} {
		var in *fault.Input
		if _, err := LoadKey(spec, getenv); !errors.As(err, &in) {
			t.Errorf("LoadKey(%q): %v, want bad input", spec, err)
		}
	}
}
