package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// fluxKustomization is a Flux Kustomization of the artifact's root, for `flux build`.
const fluxKustomization = `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: shop, namespace: flux-system}
spec:
  interval: 10m
  path: ./
  prune: true
  sourceRef: {kind: OCIRepository, name: shop}
  targetNamespace: shop
`

// Flux's own CLI (flux2, built from its module by testdata/tools/flux.sh) pulls what toa-push
// --artifact pushed, finds the kustomization's files as toa-push wrote them, and builds it as
// its kustomize-controller would: every image pinned by digest.
func TestArtifactReadByFlux(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm and flux")
	}
	flux := harness.Tool(t, "flux")
	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	t.Setenv("TOA_CACHE", t.TempDir())
	k := filepath.Join(dir, "deployment")
	out := pushArtifact(t, dir, "-k", k, "--artifact", addr+"/pushed/deploy:production")

	pulled := t.TempDir() // flux pull wants the folder to exist
	if o, err := tool(t, flux, "pull", "artifact", "oci://"+out.Artifact.Reference, "--output", pulled, "--insecure-registry"); err != nil {
		t.Fatalf("flux pull artifact: %v\n%s", err, o)
	} else {
		t.Logf("flux pull artifact:\n%s", o)
		if !strings.Contains(o, out.Artifact.Digest) {
			t.Errorf("flux pulled another digest than %s", out.Artifact.Digest)
		}
	}
	if want, got := filesIn(t, k), filesIn(t, pulled); !reflect.DeepEqual(want, got) {
		t.Errorf("flux pulled %v, toa-push wrote %v", got, want)
	}
	for name := range filesIn(t, k) {
		want, _ := os.ReadFile(filepath.Join(k, name))
		got, _ := os.ReadFile(filepath.Join(pulled, name))
		if string(want) != string(got) {
			t.Errorf("%s differs", name)
		}
	}

	ks := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(ks, []byte(fluxKustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	built, err := tool(t, flux, "build", "kustomization", "shop", "--path", pulled, "--kustomization-file", ks, "--dry-run",
		"--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if err != nil {
		t.Fatalf("flux build kustomization: %v\n%s", err, built)
	}
	for _, img := range out.Images {
		if !strings.Contains(built, "image: "+img.Reference) {
			t.Errorf("flux build: no image %s in\n%s", img.Reference, built)
		}
	}
	if !strings.Contains(built, "namespace: shop") || !strings.Contains(built, "kind: Deployment") {
		t.Errorf("flux build:\n%s", built)
	}
}

// filesIn lists a folder's files, relative to it.
func filesIn(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
