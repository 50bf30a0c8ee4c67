package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Every image a test pushes is read back by skopeo (containers/image, which podman, buildah and
// CRI-O pull with), platform by platform, and must be OCI throughout (internal/push/image/format.go): the
// images of the output and their dependencies images in a registry, or every index of an OCI
// layout. push calls readPushed on what it pushed; the tests that time a push (the air gap's)
// call it after the push's timing.

// readTags are the references read already: a tag names the same content for the length of a
// test (its registry's port is its own), so it is read once.
var readTags sync.Map

// readPushed reads what a toa-push run with args wrote, and returns what skopeo read of each
// image of the output, by name.
func readPushed(t *testing.T, out pushOutput, args ...string) map[string]*harness.Read {
	t.Helper()
	if slices.Contains(args, "--plan") {
		return nil
	}
	if dir := flagValue(args, "--oci-layout"); dir != "" {
		return readLayout(t, out, dir)
	}
	reads := map[string]*harness.Read{}
	for _, img := range out.Images {
		repo, _, _ := strings.Cut(img.Reference, "@")
		for _, tag := range harness.Tags(t, repo) {
			if tag != img.Tag && !strings.HasPrefix(tag, "deps-") {
				continue
			}
			ref := repo + ":" + tag
			if _, done := readTags.LoadOrStore(ref, true); done && tag != img.Tag {
				continue
			}
			r := harness.Skopeo(t, ref)
			r.RequireOCI(t)
			if tag == img.Tag {
				checkPlatforms(t, img.Name, r, img.Platforms)
				reads[img.Name] = r
			}
		}
		if reads[img.Name] == nil {
			t.Errorf("skopeo: %s has no tag %s", repo, img.Tag)
		}
	}
	return reads
}

// readLayout reads every index of the OCI layout dir by its tag, through skopeo's oci: transport.
func readLayout(t *testing.T, out pushOutput, dir string) map[string]*harness.Read {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Manifests []struct {
			MediaType   string
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(data, &index); err != nil {
		t.Fatalf("the layout's index.json: %v", err)
	}
	reads := map[string]*harness.Read{}
	for _, m := range index.Manifests {
		if m.MediaType != "application/vnd.oci.image.index.v1+json" {
			continue // what is attached to the images: SBOMs, provenance, signatures (attest)
		}
		r := harness.SkopeoLayout(t, dir, m.Annotations["org.opencontainers.image.ref.name"])
		r.RequireOCI(t)
		for _, img := range out.Images {
			if img.Digest == m.Digest {
				checkPlatforms(t, img.Name, r, img.Platforms)
				reads[img.Name] = r
			}
		}
	}
	for _, img := range out.Images {
		if reads[img.Name] == nil {
			t.Errorf("the layout %s holds no %s (%s)", dir, img.Name, img.Digest)
		}
	}
	return reads
}

func checkPlatforms(t *testing.T, name string, r *harness.Read, want []string) {
	t.Helper()
	var got []string
	for _, p := range r.Platforms() {
		got = append(got, strings.TrimSuffix(p, "/v8")) // linux/arm64 means v8
	}
	if want != nil && !slices.Equal(got, want) {
		t.Errorf("skopeo: %s has %v, toa-push says %v", name, got, want)
	}
}

// flagValue is the value of a flag in args, as --flag VALUE or --flag=VALUE, or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
