package kustomize

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// imagesFixture is a kustomization whose images entries reach every place kustomize's image
// filters reach, and some they do not: containers and init containers of each workload kind, a
// Job's and a CronJob's, image volumes, containers of a custom resource at any depth, a
// CustomResourceDefinition (which kustomize leaves alone), a name with a dot that matches
// another host (kustomize reads an entry's name as a regular expression), entries that rename an
// image to one a later entry changes, tags, digests, tag suffixes, an image in an annotation.
var imagesFixture = map[string]string{
	"kustomization.yaml": `resources: [workloads.yaml, custom.yaml]
labels:
- pairs: {toa/context: shop}
images:
- {name: registry.local/shop/a, digest: "sha256:aaaa"}
- {name: registry.local/shop/b, newName: registry.local/shop/b2}
- {name: registry.local/shop/b2, newTag: v2}
- {name: busybox, newTag: "1.36"}
- {name: registry.local/shop/c, newTag: v3, digest: "sha256:cccc"}
- {name: registry.local/shop/d, tagSuffix: -arm64}
- {name: registry.local/shop/volume, newName: registry.local/shop/volume-data}
- {name: registry.local/shop/nowhere, newTag: never}
imageTags:
- {name: registry.local/shop/legacy, newTag: from-imageTags}
`,
	"workloads.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: a, annotations: {image: registry.local/shop/a}}
spec:
  selector: {matchLabels: {app: a}}
  template:
    metadata: {labels: {app: a}}
    spec:
      initContainers: [{name: init, image: busybox}]
      containers:
      - {name: a, image: registry.local/shop/a}
      - {name: b, image: "registry.local/shop/b:v1"}
      - {name: c, image: "registry.local/shop/c@sha256:0000"}
      - {name: none}
      volumes:
      - {name: data, image: {reference: registry.local/shop/volume}}
      - {name: cm, configMap: {name: x}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: d}
spec:
  selector: {matchLabels: {app: d}}
  serviceName: d
  template:
    metadata: {labels: {app: d}}
    spec:
      containers: [{name: d, image: "registry.local/shop/d:v1"}, {name: e, image: registryxlocal/shop/a}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 0 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: n, image: registry.local/shop/legacy}]
          volumes: [{name: v, image: {reference: registry.local/shop/volume}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: p, image: "registry.local/shop/b2:v0"}]
`,
	"custom.yaml": `apiVersion: example.com/v1
kind: Runner
metadata: {name: r}
spec:
  deep:
    containers: [{name: r, image: registry.local/shop/a}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: runners.example.com}
spec:
  group: example.com
  names: {kind: Runner, plural: runners}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-example: {containers: [{name: r, image: registry.local/shop/a}]}
`,
}

// compositionsFixture is a kustomization as toa-push writes it for n compositions: a file per
// kind, the context's label, an images entry pinning each composition's image by digest.
func compositionsFixture(n int) map[string]string {
	var deployments, services, images []string
	for i := range n {
		name := fmt.Sprintf("c%03d", i)
		deployments = append(deployments, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: composition-%[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {toa/composition: %[1]s}}
  template:
    metadata: {labels: {toa/composition: %[1]s}}
    spec:
      containers: [{name: %[1]s, image: 127.0.0.1:5000/shop/composition-%[1]s}]
`, name))
		services = append(services, fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %[1]s}\nspec:\n  selector: {toa/composition: %[1]s}\n  ports: [{port: 3000}]\n", name))
		images = append(images, fmt.Sprintf("- {name: 127.0.0.1:5000/shop/composition-%s, digest: \"sha256:%x\"}\n", name, sha256.Sum256([]byte(name))))
	}
	return map[string]string{
		"kustomization.yaml": "resources: [service.yaml, deployment.yaml]\nlabels:\n- pairs: {toa/context: shop}\nimages:\n" + strings.Join(images, ""),
		"service.yaml":       strings.Join(services, "---\n"),
		"deployment.yaml":    strings.Join(deployments, "---\n"),
	}
}

func inMemory(t *testing.T, files map[string]string) (filesys.FileSystem, string) {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	for name, data := range files {
		if err := fs.WriteFile(filepath.Join("/app", name), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	return fs, "/app"
}

// Render applies a kustomization's images after kustomize where it may (deferImages), and the
// objects are exactly those kustomize gives when it applies them itself.
func TestDeferredImages(t *testing.T) {
	type fixture struct {
		name     string
		fs       filesys.FileSystem
		dir      string
		deferred bool
	}
	var fixtures []fixture
	fs, dir := inMemory(t, imagesFixture)
	fixtures = append(fixtures, fixture{"every place of an image", fs, dir, true})
	fs, dir = inMemory(t, compositionsFixture(30))
	fixtures = append(fixtures, fixture{"30 compositions as toa-push writes them", fs, dir, true})
	withReplacements := map[string]string{}
	for k, v := range imagesFixture {
		withReplacements[k] = v
	}
	withReplacements["kustomization.yaml"] += `replacements:
- source: {kind: Pod, name: p, fieldPath: spec.containers.0.image}
  targets: [{select: {kind: Deployment}, fieldPaths: [metadata.annotations.copied], options: {create: true}}]
`
	fs, dir = inMemory(t, withReplacements)
	fixtures = append(fixtures, fixture{"replacements, which run after images", fs, dir, false})
	deferredWritten := 0
	for _, d := range writtenDirs(t) {
		_, deferred := deferImages(filesys.MakeFsOnDisk(), d)
		if deferred {
			deferredWritten++
		}
		fixtures = append(fixtures, fixture{d, filesys.MakeFsOnDisk(), d, deferred})
	}
	if deferredWritten < len(fixtures)-4 {
		t.Errorf("the images of %d of toa-push's %d kustomizations are deferred, want all", deferredWritten, len(fixtures)-4)
	}
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			if _, deferred := deferImages(f.fs, f.dir); deferred != f.deferred {
				t.Errorf("deferImages = %v, want %v", deferred, f.deferred)
			}
			ctx := context.Background()
			got, err := Render(ctx, f.fs, f.dir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := render(ctx, f.fs, f.dir, options{client: RemoteClient()}, false)
			if err != nil {
				t.Fatal(err)
			}
			want, err := objectsOf(m, f.dir)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := string(yamlOf(t, got)), string(yamlOf(t, want)); a != b {
				t.Errorf("deferred images differ from kustomize's:\n--- deferred\n%s\n--- kustomize\n%s", a, b)
			}
		})
	}
}

// TestImageMatches: an entry's name matches an image exactly where kustomize's pattern ("^" +
// name + a tag + a digest) does, without a pattern compiled for each entry.
func TestImageMatches(t *testing.T) {
	names := []string{"registry.local/shop/a", "busybox", "r.l/x"}
	ix := newImageIndex([]types.Image{{Name: names[0]}, {Name: names[1]}, {Name: names[2]}})
	for _, v := range []string{
		"registry.local/shop/a", "registryxlocal/shop/a", "registry\nlocal/shop/a", "registryélocal/shop/a",
		"registry.local/shop/a:v1", "registry.local/shop/a@sha256:00aa", "registry.local/shop/a:v1@sha256:00aa",
		"registry.local/shop/ab", "registry.local/shop/a:v1:v2", "registry.local/shop/a@nothing", "registry.local/shop",
		"busybox", "busybox:1.36", "busybox:", "busyboxx", "rél/x", "r€l/x", "r.l/x:{tag}",
	} {
		for i, name := range names {
			want := regexp.MustCompile("^" + name + `(:[a-zA-Z0-9_.{}-]*)?(@[a-zA-Z0-9]+([.+_-][a-zA-Z0-9]+)*:[a-zA-Z0-9_.{}-]*)?$`).MatchString(v)
			if got := ix.matches(i, v); got != want {
				t.Errorf("%q matches %q: %v, kustomize's pattern says %v", name, v, got, want)
			}
		}
	}
}
