package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

var (
	kustomizationResource = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	ociRepositoryResource = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "ocirepositories"}
	deploymentResource    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// What the README tells a cluster to hold: the cosign key in a Secret, an OCIRepository that
// verifies the artifact with it, a Kustomization that applies it and waits.
func fluxSource(name, pubPEM, repo string) string {
	indented := "    " + strings.ReplaceAll(strings.TrimSpace(pubPEM), "\n", "\n    ")
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %[1]s-cosign}
stringData:
  cosign.pub: |
%[2]s
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: %[1]s}
spec:
  interval: 10s
  url: oci://%[3]s
  ref: {tag: production}
  insecure: true
  verify:
    provider: cosign
    secretRef: {name: %[1]s-cosign}`, name, indented, repo)
}

func fluxKustomizationOf(source, targetNamespace string) string {
	return fmt.Sprintf(`apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %[1]s}
spec:
  interval: 10m
  retryInterval: 10s
  sourceRef: {kind: OCIRepository, name: %[1]s}
  path: ./
  prune: true
  wait: true
  timeout: 3m
  targetNamespace: %[2]s`, source, targetNamespace)
}

// Flux's source-controller and kustomize-controller, built from their modules and run against
// the local control plane, reconcile what toa-push --artifact --sign-key pushed, with cosign
// verification on: the application's Deployments roll out with the images toa-push pinned; a
// code change pushed again is picked up and rolled out too.
func TestFluxReconcilesTheArtifact(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm, the control plane and Flux's controllers")
	}
	if os.Getenv("TOA_TEST_NO_CLUSTER") == "1" {
		t.Skip("TOA_TEST_NO_CLUSTER=1: no control plane")
	}
	cosign := harness.Tool(t, "cosign")
	kubeconfig := harness.Kubeconfig(t)
	namespace := harness.Namespace(t, kubeconfig)
	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	key, pub := cosignKeyPair(t, cosign)
	harness.FluxControllers(t, kubeconfig, namespace) // before TOA_CACHE moves: they are in the tools cache
	t.Setenv("TOA_CACHE", t.TempDir())
	repo := addr + "/pushed/deploy"
	k := filepath.Join(dir, "deployment")
	first := pushArtifact(t, dir, "-k", k, "--sign-key", key, "--artifact", repo+":production")

	pubPEM, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	harness.ApplyYAML(t, kubeconfig, namespace, fluxSource("shop", string(pubPEM), repo)+"\n---\n"+fluxKustomizationOf("shop", namespace))
	rolledOut(t, kubeconfig, namespace, first)

	// the same artifact, verified with a key that did not sign it: Flux refuses it
	_, strangerPub := cosignKeyPair(t, cosign)
	strangerPEM, err := os.ReadFile(strangerPub)
	if err != nil {
		t.Fatal(err)
	}
	harness.ApplyYAML(t, kubeconfig, namespace, fluxSource("stranger", string(strangerPEM), repo))
	refused(t, kubeconfig, namespace, "stranger")

	// a code change: one composition's sources layer, a new digest of the kustomization
	src := filepath.Join(dir, "components", "shop.orders", "operations.js")
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, append(code, []byte("\n// a change\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	second := pushArtifact(t, dir, "-k", k, "--sign-key", key, "--artifact", repo+":production")
	if second.Artifact.Digest == first.Artifact.Digest {
		t.Fatal("a code change gave the same artifact")
	}
	rolledOut(t, kubeconfig, namespace, second)
}

// rolledOut waits, at most 5 minutes, until Flux has applied the artifact of out (the
// Kustomization's lastAppliedRevision names its digest, and it is Ready: with wait, its
// Deployments rolled out), then checks that each Deployment runs the image toa-push pinned and
// has rolled out.
func rolledOut(t *testing.T, kubeconfig, namespace string, out artifactOutput) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	for {
		ks := harness.Get(t, kubeconfig, kustomizationResource, namespace, "shop")
		applied, _, _ := unstructured.NestedString(ks.Object, "status", "lastAppliedRevision")
		if strings.HasSuffix(applied, out.Artifact.Digest) && condition(ks, "Ready") == "True" {
			t.Logf("Flux applied %s and its Deployments rolled out, %.1fs into the wait", applied, time.Since(start).Seconds())
			break
		}
		if time.Now().After(deadline) {
			oci := harness.Get(t, kubeconfig, ociRepositoryResource, namespace, "shop")
			t.Fatalf("after 5m Flux applied %q, not %s\nKustomization: %v\nOCIRepository: %v", applied, out.Artifact.Digest,
				ks.Object["status"], oci.Object["status"])
		}
		time.Sleep(time.Second)
	}
	for _, img := range out.Images {
		d := harness.Get(t, kubeconfig, deploymentResource, namespace, img.Name)
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		image := ""
		if len(containers) > 0 {
			image, _, _ = unstructured.NestedString(containers[0].(map[string]any), "image")
		}
		replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
		updated, _, _ := unstructured.NestedInt64(d.Object, "status", "updatedReplicas")
		available, _, _ := unstructured.NestedInt64(d.Object, "status", "availableReplicas")
		if image != img.Reference || updated != replicas || available != replicas {
			t.Errorf("Deployment %s: image %s (want %s), %d of %d updated, %d available", img.Name, image, img.Reference, updated, replicas, available)
		}
	}
	oci := harness.Get(t, kubeconfig, ociRepositoryResource, namespace, "shop")
	if condition(oci, "SourceVerified") != "True" {
		t.Errorf("the OCIRepository's SourceVerified condition is %q: %v", condition(oci, "SourceVerified"), oci.Object["status"])
	}
}

// refused waits, at most 2 minutes, until the OCIRepository name says that the signature did
// not verify.
func refused(t *testing.T, kubeconfig, namespace, name string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		oci := harness.Get(t, kubeconfig, ociRepositoryResource, namespace, name)
		if condition(oci, "SourceVerified") == "False" {
			t.Logf("Flux refused the artifact verified with another key: %v", oci.Object["status"])
			if _, found, _ := unstructured.NestedMap(oci.Object, "status", "artifact"); found {
				t.Errorf("the OCIRepository %s stored the artifact all the same", name)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m the OCIRepository %s did not refuse the artifact: %v", name, oci.Object["status"])
		}
		time.Sleep(time.Second)
	}
}

// condition is the status of an object's condition of type kind, "" when it has none.
func condition(obj *unstructured.Unstructured, kind string) string {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == kind {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}
