package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

type artifactOutput struct {
	Images []struct {
		Name      string `json:"name"`
		Reference string `json:"reference"`
	} `json:"images"`
	Artifact *struct {
		Reference  string `json:"reference"`
		Digest     string `json:"digest"`
		Signature  string `json:"signature"`
		Pushed     bool   `json:"pushed"`
		Provenance string `json:"provenance"`
	} `json:"artifact"`
}

func pushArtifact(t *testing.T, dir string, args ...string) artifactOutput {
	t.Helper()
	code, stdout, stderr := run(t, dir, append([]string{"-o", "json", "--path", dir}, args...)...)
	if code != 0 {
		t.Fatalf("toa-push %v exited %d:\n%s", args, code, stderr)
	}
	var out artifactOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if out.Artifact == nil {
		t.Fatalf("toa-push %v: no artifact in\n%s", args, stdout)
	}
	return out
}

// toa-push --artifact pushes the kustomization as a Flux artifact, signed: cosign verifies it,
// oras reads Flux's media types, toa-apply oci://REF --verify-key renders it; the same
// kustomization gives the same digest, also through --oci-layout and --from-oci-layout; and
// toa-apply refuses, naming it, an image the artifact pins that is not signed.
func TestArtifact(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm, oras and cosign")
	}
	oras, cosign := harness.Tool(t, "oras"), harness.Tool(t, "cosign")
	apply := buildApply(t)
	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	key, pub := cosignKeyPair(t, cosign)
	t.Setenv("TOA_CACHE", t.TempDir())
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	ref := addr + "/pushed/deploy:production"
	k := filepath.Join(dir, "deployment")

	out := pushArtifact(t, dir, "-k", k, "--sign-key", key, "--artifact", ref,
		"--artifact-source", "https://git.example/shop", "--artifact-revision", "main@sha1:0123abcd")
	a := out.Artifact
	if a.Reference != ref || !strings.HasPrefix(a.Digest, "sha256:") || !a.Pushed || !strings.HasPrefix(a.Provenance, "sha256:") || a.Signature != addr+"/pushed/deploy:"+strings.Replace(a.Digest, ":", "-", 1)+".sig" {
		t.Errorf("artifact %+v", a)
	}
	byDigest := addr + "/pushed/deploy@" + a.Digest
	provenance := addr + "/pushed/deploy@" + a.Provenance
	for _, signed := range []string{byDigest, provenance} {
		if o, err := tool(t, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", signed); err != nil {
			t.Errorf("cosign verify %s: %v\n%s", signed, err, o)
		}
	}
	// its provenance, a referrer, names every image it pins
	if o, err := tool(t, oras, "discover", "--plain-http", "--format", "json", byDigest); err != nil || !strings.Contains(o, a.Provenance) {
		t.Errorf("oras discover %s: %v\n%s", byDigest, err, o)
	}
	pulled := t.TempDir()
	if o, err := tool(t, oras, "pull", "--plain-http", "-o", pulled, provenance); err != nil {
		t.Errorf("oras pull %s: %v\n%s", provenance, err, o)
	} else if doc, err := os.ReadFile(filepath.Join(pulled, "provenance.intoto.json")); err != nil {
		t.Error(err)
	} else {
		for _, img := range out.Images {
			if !strings.Contains(string(doc), "oci://"+img.Reference) {
				t.Errorf("the artifact's provenance does not name %s:\n%s", img.Reference, doc)
			}
		}
	}
	manifest, err := tool(t, oras, "manifest", "fetch", "--plain-http", ref)
	if err != nil {
		t.Fatalf("oras manifest fetch: %v\n%s", err, manifest)
	}
	for _, want := range []string{`"application/vnd.cncf.flux.config.v1+json"`, `"application/vnd.cncf.flux.content.v1.tar+gzip"`,
		`"org.opencontainers.image.created":"2023-11-14T22:13:20Z"`, `"org.opencontainers.image.revision":"main@sha1:0123abcd"`,
		`"org.opencontainers.image.source":"https://git.example/shop"`} {
		if !strings.Contains(manifest, want) {
			t.Errorf("the artifact's manifest lacks %s:\n%s", want, manifest)
		}
	}

	for _, from := range []string{"oci://" + ref, "oci://" + byDigest} {
		code, stdout, stderr := runApply(t, apply, from, "--render", "--verify-key", pub, "-v")
		if code != 0 {
			t.Fatalf("toa-apply %s --render --verify-key exited %d:\n%s", from, code, stderr)
		}
		for _, img := range out.Images {
			if !strings.Contains(stdout, "image: "+img.Reference) {
				t.Errorf("toa-apply %s --render: no image %s", from, img.Reference)
			}
		}
	}

	again := pushArtifact(t, dir, "-k", k, "--sign-key", key, "--artifact", ref,
		"--artifact-source", "https://git.example/shop", "--artifact-revision", "main@sha1:0123abcd")
	if again.Artifact.Digest != a.Digest || again.Artifact.Pushed {
		t.Errorf("the same kustomization again: %+v, first %+v", again.Artifact, a)
	}

	// across an air gap: the layout holds the artifact and its signature, --from-oci-layout
	// pushes them with the same digest
	layout := filepath.Join(t.TempDir(), "layout")
	layoutRef := addr + "/pushed/deploy:carried"
	written := pushArtifact(t, dir, "--oci-layout", layout, "--sign-key", key, "--artifact", layoutRef,
		"--artifact-source", "https://git.example/shop", "--artifact-revision", "main@sha1:0123abcd")
	if written.Artifact.Digest != a.Digest {
		t.Errorf("into the layout: digest %s, pushed %s", written.Artifact.Digest, a.Digest)
	}
	carried := pushArtifact(t, t.TempDir(), "--from-oci-layout", layout, "-k", filepath.Join(t.TempDir(), "k"))
	if carried.Artifact.Digest != a.Digest || carried.Artifact.Reference != layoutRef || !carried.Artifact.Pushed || carried.Artifact.Signature == "" ||
		carried.Artifact.Provenance != written.Artifact.Provenance {
		t.Errorf("from the layout: %+v", carried.Artifact)
	}
	if o, err := tool(t, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", layoutRef); err != nil {
		t.Errorf("cosign verify %s: %v\n%s", layoutRef, err, o)
	}

	// another key's public half: refused before anything is applied
	_, other := cosignKeyPair(t, cosign)
	code, _, stderr := runApply(t, apply, "oci://"+ref, "--render", "--verify-key", other)
	if code != 1 || !strings.Contains(stderr, "the artifact "+byDigest+" is not signed by the key") {
		t.Errorf("another key: exit %d\n%s", code, stderr)
	}
}

// An artifact signed over images that are not: toa-apply --verify-key names the first image.
func TestArtifactOfUnsignedImages(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm and cosign")
	}
	cosign := harness.Tool(t, "cosign")
	apply := buildApply(t)
	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	key, pub := cosignKeyPair(t, cosign)
	t.Setenv("TOA_CACHE", t.TempDir())
	k := filepath.Join(dir, "deployment")
	if code, _, stderr := run(t, dir, "--path", dir, "-k", k, "--sbom", "none"); code != 0 {
		t.Fatalf("toa-push exited %d:\n%s", code, stderr)
	}
	// the images are there: nothing is built, nothing attached, and only the artifact is signed
	out := pushArtifact(t, dir, "-k", k, "--sign-key", key, "--artifact", addr+"/pushed/deploy:production")
	code, stdout, stderr := runApply(t, apply, "oci://"+out.Artifact.Reference, "--render", "--verify-key", pub)
	named := false
	for _, img := range out.Images {
		named = named || strings.Contains(stderr, "the image "+img.Reference+" is not signed (no sha256-")
	}
	if code != 1 || !named || stdout != "" {
		t.Errorf("unsigned images: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

func runApply(t *testing.T, apply string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(apply, args...)
	cmd.Env = append(os.Environ(), "CI=true", "HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir())
	return outcome(t, cmd)
}

// --artifact's mistakes are refused before any work (exit 2), saying what to give.
func TestArtifactFlags(t *testing.T) {
	app := filepath.Join("..", "..", "testdata", "apps", "pushed")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--plan", "--artifact", "registry.internal/shop/deploy:production"}, "--plan pushes nothing, and takes no --artifact"},
		{[]string{"--artifact-revision", "main@sha1:abc"}, "give --artifact REF too"},
		{[]string{"--from-oci-layout", t.TempDir(), "--artifact", "registry.internal/shop/deploy:production"}, "takes no --artifact"},
		{[]string{"--artifact", "registry.internal/shop/deploy@sha256:" + strings.Repeat("a", 64)}, "it names a digest; give a tag"},
		{[]string{"--artifact", "registry.internal/Shop Deploy"}, `--artifact: "registry.internal/Shop Deploy" is not a reference to push to`},
	} {
		code, _, stderr := run(t, t.TempDir(), append([]string{"--path", app}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %s; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// CI's second job with --artifact: toa-apply oci://REF@DIGEST --verify-key applies what the
// first job pushed, on the local control plane, and waits for it as for a folder.
func TestApplyFromRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm, cosign and the control plane")
	}
	if os.Getenv("TOA_TEST_NO_CLUSTER") == "1" {
		t.Skip("TOA_TEST_NO_CLUSTER=1: no control plane")
	}
	cosign := harness.Tool(t, "cosign")
	kubeconfig := harness.Kubeconfig(t)
	namespace := harness.Namespace(t, kubeconfig)
	apply := buildApply(t)
	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	key, pub := cosignKeyPair(t, cosign)
	t.Setenv("TOA_CACHE", t.TempDir())
	out := pushArtifact(t, dir, "--sign-key", key, "--artifact", addr+"/pushed/deploy:production")
	from := "oci://" + addr + "/pushed/deploy@" + out.Artifact.Digest
	code, stdout, stderr := runApply(t, apply, from, "--verify-key", pub, "--kubeconfig", kubeconfig, "-n", namespace, "--timeout", "3m")
	if code != 0 {
		t.Fatalf("toa-apply %s exited %d:\n%s\n%s", from, code, stdout, stderr)
	}
	cs := clientsetFor(t, kubeconfig)
	for _, img := range out.Images {
		d := getDeployment(t, cs, namespace, img.Name)
		if c := d.Spec.Template.Spec.Containers[0]; c.Image != img.Reference || d.Status.UpdatedReplicas != *d.Spec.Replicas {
			t.Errorf("Deployment %s: image %s, %d updated", img.Name, c.Image, d.Status.UpdatedReplicas)
		}
	}
	if !strings.Contains(stdout, "revision 1 recorded") {
		t.Errorf("toa-apply:\n%s", stdout)
	}
}
