package sign_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/sign"
)

// A key `cosign generate-key-pair` made, encrypted with its password, signs for toa-push: opened
// with COSIGN_PASSWORD as cosign opens it, its public key is the cosign.pub cosign wrote beside
// it. Without the password, or with another, it is bad input that says which.
func TestCosignEncryptedKey(t *testing.T) {
	cosign := harness.Tool(t, "cosign")
	dir := t.TempDir()
	cmd := exec.Command(cosign, "generate-key-pair")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=toa-test-password")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	keyFile := filepath.Join(dir, "cosign.key")
	lookup := func(env map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	}

	signer, err := sign.LoadKey(keyFile, lookup(map[string]string{sign.PasswordEnv: "toa-test-password"}))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := signer.PublicKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(pub), bytes.TrimSpace(want)) {
		t.Errorf("public key\n%s\nwhere cosign wrote\n%s", pub, want)
	}

	for name, env := range map[string]map[string]string{
		"no password":    {},
		"wrong password": {sign.PasswordEnv: "another"},
	} {
		_, err := sign.LoadKey(keyFile, lookup(env))
		var in *fault.Input
		if !errors.As(err, &in) || in.File != keyFile {
			t.Errorf("%s: %v, want bad input naming %s", name, err, keyFile)
		}
		t.Logf("%s: %v", name, err)
	}
}
