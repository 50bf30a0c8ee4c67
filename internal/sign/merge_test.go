package sign

import (
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Merge adds what the registry lacks and keeps what it has: another signer's signature stays,
// ours is added once, and a second merge has nothing to write.
func TestMerge(t *testing.T) {
	repo, digest := "127.0.0.1:5000/shop/composition-front", "sha256:"+strings.Repeat("ab", 32)
	ours, _ := ParseKey(sec1PEM(t, newKey(t, elliptic.P256())), "ours.pem", nil)
	theirs, _ := ParseKey(sec1PEM(t, newKey(t, elliptic.P256())), "theirs.pem", nil)
	have, err := theirs.Image(nil, repo, digest)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := ours.Image(nil, repo, digest)
	if err != nil {
		t.Fatal(err)
	}
	both, err := Merge(have, mine)
	if err != nil || both == nil {
		t.Fatalf("merge: %v, %v", both, err)
	}
	if m, _ := both.Manifest(); len(m.Layers) != 2 {
		t.Errorf("%d signatures, want theirs and ours", len(m.Layers))
	}
	for _, s := range []*Signer{ours, theirs} {
		if err := Verify(both, s.PublicKey(), digest); err != nil {
			t.Error(err)
		}
	}
	if again, err := Merge(both, mine); err != nil || again != nil {
		t.Errorf("merging what is there gave %v, %v; want nothing to write", again, err)
	}
}

// Verify reads a bounded signature image: a layer larger than a payload is no signature, more
// layers than signers are refused, and a digest nobody signed is a *NotSigned that counts them.
func TestVerifyBounds(t *testing.T) {
	k := newKey(t, elliptic.P256())
	s, _ := ParseKey(sec1PEM(t, k), "key.pem", nil)
	digest := "sha256:" + strings.Repeat("ab", 32)
	sigs, err := s.Image(nil, "r/shop/front", digest)
	if err != nil {
		t.Fatal(err)
	}
	large, err := mutate.Append(sigs, mutate.Addendum{Layer: static.NewLayer(make([]byte, maxPayload+1), MediaTypeSimpleSigning)})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(large, s.PublicKey(), digest); err != nil {
		t.Errorf("a large layer beside the signature: %v", err)
	}
	var none *NotSigned
	if err := Verify(large, s.PublicKey(), "sha256:"+strings.Repeat("cd", 32)); !errors.As(err, &none) || none.Signatures != 2 {
		t.Errorf("another digest: %v, want NotSigned of 2 signatures", err)
	}
	many := sigs
	for i := 0; i < maxSignatures; i++ {
		many, _ = mutate.Append(many, mutate.Addendum{Layer: static.NewLayer([]byte{byte(i)}, MediaTypeSimpleSigning)})
	}
	if err := Verify(many, s.PublicKey(), digest); err == nil || errors.As(err, &none) {
		t.Errorf("%d signatures: %v, want refused", maxSignatures+1, err)
	}
}

// ReadPublicKey takes cosign.pub and refuses, as bad input naming the file, what is not a P-256
// public key; a named pipe in its place is refused at once rather than blocking the run.
func TestReadPublicKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	k := newKey(t, elliptic.P256())
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pub := write("cosign.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	if got, err := ReadPublicKey(pub); err != nil || !got.Equal(&k.PublicKey) {
		t.Errorf("cosign.pub: %v, %v", got, err)
	}
	p384, _ := x509.MarshalPKIXPublicKey(&newKey(t, elliptic.P384()).PublicKey)
	fifo := filepath.Join(dir, "fifo.pub")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, file := range map[string]string{
		"private key": write("private.pem", sec1PEM(t, k)),
		"P-384":       write("p384.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: p384})),
		"too large":   write("large.pub", make([]byte, maxKey+1)),
		"missing":     filepath.Join(dir, "missing.pub"),
		"fifo":        fifo,
	} {
		start := time.Now()
		_, err := ReadPublicKey(file)
		var in *fault.Input
		if !errors.As(err, &in) || in.File != file {
			t.Errorf("%s: %v, want bad input naming %s", name, err, file)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %s", name, d)
		}
	}
}

// toa-apply verifies with this package, so it links nothing of the push chain: of ours, only
// fault and fsys.
func TestImportsOnlyTheGroundFloor(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/toa-deploy/toa-deploy/"
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, module) && pkg != module+"internal/fault" && pkg != module+"internal/fsys" {
			t.Errorf("sign imports %s", pkg)
		}
	}
}
