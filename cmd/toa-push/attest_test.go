package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// cosignKeyPair is a key pair `cosign generate-key-pair` makes: the private key encrypted with the
// password the test puts in COSIGN_PASSWORD, for toa-push and cosign alike.
func cosignKeyPair(t *testing.T, cosign string) (key, pub string) {
	t.Helper()
	const password = "toa-test-password"
	t.Setenv("COSIGN_PASSWORD", password)
	dir := t.TempDir()
	cmd := exec.Command(cosign, "generate-key-pair")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	return filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
}

type attestedOutput struct {
	Images []struct {
		Name        string             `json:"name"`
		Reference   string             `json:"reference"`
		Digest      string             `json:"digest"`
		Built       bool               `json:"built"`
		Attachments []image.Attachment `json:"attachments"`
	} `json:"images"`
}

func tool(t *testing.T, path string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), path, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// toa-push --sign-key: every image built gets an SBOM per platform, provenance and signatures,
// listed by -o json, read by oras and verified by cosign; a push with no change adds nothing.
func TestAttestations(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm, oras and cosign")
	}
	oras, cosign := harness.Tool(t, "oras"), harness.Tool(t, "cosign")
	addr, rec := harness.RegistryWithLog(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	key, pub := cosignKeyPair(t, cosign) // encrypted, as cosign makes them; COSIGN_PASSWORD opens it
	t.Setenv("TOA_CACHE", t.TempDir())
	args := []string{"-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment"), "--sign-key", key}
	code, stdout, stderr := run(t, dir, args...)
	if code != 0 {
		t.Fatalf("toa-push exited %d:\n%s", code, stderr)
	}
	var out attestedOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	for _, img := range out.Images {
		kinds := map[string]int{}
		for _, a := range img.Attachments {
			kinds[a.Kind]++
		}
		// two platforms: an SBOM each and one of each dependencies image (which lists the
		// packages), the provenance, and signatures of the index, the two platforms' images, the
		// two dependencies images and the five documents
		if kinds["sbom"] != 2 || kinds["dependencies sbom"] != 2 || kinds["provenance"] != 1 || kinds["signature"] != 10 {
			t.Errorf("%s: attached %v", img.Name, kinds)
		}
		repo, _, _ := strings.Cut(img.Reference, "@")
		if o, err := tool(t, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", img.Reference); err != nil {
			t.Errorf("cosign verify %s: %v\n%s", img.Reference, err, o)
		}
		o, err := tool(t, oras, "discover", "--plain-http", "--format", "json", img.Reference)
		if err != nil || !strings.Contains(o, "application/vnd.in-toto+json") {
			t.Errorf("oras discover %s: %v\n%s", img.Reference, err, o)
		}
		for _, a := range img.Attachments {
			if a.Kind == "sbom" && a.MediaType != "application/spdx+json" {
				t.Errorf("%s: an SBOM of %s, want SPDX by default", img.Name, a.MediaType)
			}
			if a.Kind == "signature" && !strings.HasPrefix(a.Reference, repo+":sha256-") {
				t.Errorf("%s: a signature under %s", img.Name, a.Reference)
			}
		}
	}
	rec.Reset()
	code, stdout, stderr = run(t, dir, args...)
	if code != 0 {
		t.Fatalf("toa-push exited %d:\n%s", code, stderr)
	}
	out = attestedOutput{}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	for _, img := range out.Images {
		if img.Built || len(img.Attachments) != 0 {
			t.Errorf("a push with no change built %v, attached %+v", img.Built, img.Attachments)
		}
	}
	for _, r := range rec.Requests() {
		if r.Method != "HEAD" && r.Method != "GET" {
			t.Errorf("a push with no change sent %s %s", r.Method, r.Path)
		}
	}
}

func TestAttestationFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(bad, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--sbom", "xml"}, nil, `--sbom must be one of "spdx","cyclonedx","none"`},
		{[]string{"--sign-key", bad}, nil, "bad.key: holds no PEM private key"},
		{[]string{"--sign-key", "env://TOA_TEST_UNSET_KEY"}, nil, "TOA_TEST_UNSET_KEY, which is not set"},
		{nil, []string{"TOA_SIGN_KEY=junk"}, "$TOA_SIGN_KEY: holds no PEM private key"},
		{[]string{"--from-oci-layout", t.TempDir(), "--sign-key", bad}, nil, "takes no --sign-key"},
		{[]string{"--from-oci-layout", t.TempDir(), "--sbom", "none"}, nil, "takes no --sbom none"},
	} {
		for _, e := range c.env {
			k, v, _ := strings.Cut(e, "=")
			t.Setenv(k, v)
		}
		// the key is read before the context: an empty folder is never looked at
		code, _, stderr := run(t, t.TempDir(), append([]string{"--path", t.TempDir()}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, %s; want 2 and %q", c.args, c.env, code, stderr, c.want)
		}
		for _, e := range c.env {
			k, _, _ := strings.Cut(e, "=")
			os.Unsetenv(k)
		}
	}
}
