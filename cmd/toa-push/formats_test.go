package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
)

// TestBaseFormats pushes the application on a base of every shape users have
// (internal/harness/shapes.go): an OCI index of OCI manifests, an OCI index of Docker v2
// manifests, a Docker manifest list, a single OCI and a single Docker manifest, a buildx index
// with attestations, a musl base, and a musl base of zstd layers. Whatever the base, every image
// is OCI (internal/push/image/format.go), read by skopeo platform by platform (push reads every image it
// pushes), copied by skopeo and unpacked by umoci; the base's layers are in it as the base has
// them; the libc is found in the base's layers, zstd ones too. On the Docker manifest list, the
// other outputs as well: --mono, --oci-layout and --from-oci-layout, --mirror, and extension
// services' images.
func TestBaseFormats(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a registry, npm, skopeo and umoci")
	}
	addr := harness.Registry(t)
	cache := t.TempDir() // one layer cache: npm installs once per platform and libc
	type digests struct{ index, amd64 string }
	built := map[harness.BaseShape]digests{}
	for _, shape := range harness.BaseShapes {
		t.Run(string(shape), func(t *testing.T) {
			// a registry of its own: the same base content in another format is a retag of it,
			// whose tags are the same (README), so in one registry only the first shape would build
			addr := harness.Registry(t)
			base := harness.PushBase(t, addr, shape)
			// a repository of its own: bases of the same content in other formats give the same
			// tags (they cover the base's digests), and would find the images already there
			dir := copyApp(t, "pushed", addr+"/"+string(shape))
			onBase(t, dir, base, shape.Platforms())
			run := pushed(t, dir, cache)
			if len(run.out.Images) == 0 {
				t.Fatal("no image")
			}
			if want := "installing dependencies for linux/amd64 (" + shape.Libc() + ")"; !strings.Contains(run.stderr, want) {
				t.Errorf("toa-push did not say %q:\n%s", want, run.stderr)
			}
			baseRead := harness.Skopeo(t, base)
			for _, img := range run.out.Images {
				if !img.Built || !img.DepsBuilt {
					t.Errorf("%s: %+v", img.Name, img)
				}
				r := run.reads[img.Name]
				for _, platform := range img.Platforms {
					layers, baseLayers := r.Image(t, platform).Layers, baseRead.Image(t, platform).Layers
					if len(layers) <= len(baseLayers) || !slices.Equal(layers[:len(baseLayers)], baseLayers) {
						t.Errorf("%s for %s: layers %v do not begin with the base's %v", img.Name, platform, layers, baseLayers)
					}
					if a := r.Image(t, platform).Annotations; len(a) != 0 {
						t.Errorf("%s for %s: annotations %v on a base read from where the context names it", img.Name, platform, a)
					}
				}
			}
			front := run.out.Images[0]
			built[shape] = digests{front.Digest, run.reads[front.Name].Image(t, "linux/amd64").Digest}

			rootfs, process := harness.Unpacked(t, front.Reference, "linux/amd64")
			if got := strings.Join(process.Args, " "); got != "toa compose shop-orders shop-prices" || process.Cwd != "/composition" ||
				!slices.Contains(process.Env, "NODE_ENV=production") {
				t.Errorf("umoci's bundle runs %q in %s with %v", got, process.Cwd, process.Env)
			}
			for _, f := range []string{"composition/shop-orders/operations.js", "composition/shop-orders/node_modules/is-number/index.js",
				"composition/shop-prices/node_modules/esbuild/package.json", "usr/local/bin/node"} {
				if _, err := os.Stat(filepath.Join(rootfs, f)); err != nil {
					t.Errorf("umoci unpacked no %s: %v", f, err)
				}
			}
			if shape.Libc() == "glibc" { // the musl bases' node cannot run here
				stdout, stderr, code := harness.Chroot(t, rootfs, v1.Config{Env: process.Env, WorkingDir: process.Cwd}, process.Args...)
				if code != 0 || !strings.Contains(stdout, "composed 2 components") {
					t.Errorf("the image umoci unpacked, under chroot: exit %d\n%s\n%s", code, stdout, stderr)
				}
			}
		})
	}

	// The content of a base, not its format, makes the image: the same amd64 base in any format
	// gives the same amd64 image, and the same two platforms the same index.
	for _, group := range [][]harness.BaseShape{
		{harness.OCIIndex, harness.OCIIndexOfDocker, harness.DockerList, harness.Buildx},
		{harness.OCIImage, harness.DockerImage},
	} {
		for _, shape := range group[1:] {
			if built[shape].index != built[group[0]].index {
				t.Errorf("the index on the %s base is %s, on the %s base %s", shape, built[shape].index, group[0], built[group[0]].index)
			}
		}
	}
	for _, shape := range []harness.BaseShape{harness.OCIIndexOfDocker, harness.DockerList, harness.OCIImage, harness.DockerImage, harness.Buildx} {
		if built[shape].amd64 != built[harness.OCIIndex].amd64 {
			t.Errorf("the amd64 image on the %s base is %s, on the OCI index %s", shape, built[shape].amd64, built[harness.OCIIndex].amd64)
		}
	}

	t.Run("every output on a Docker manifest list", func(t *testing.T) {
		base := harness.PushBase(t, addr, harness.DockerList)
		dir := copyApp(t, "pushed", addr)
		onBase(t, dir, base, harness.DockerList.Platforms())
		pushedImages := push(t, dir, cache)

		mono := push(t, dir, cache, "--mono")
		if len(mono.Images) != 1 || mono.Images[0].Name != "mono" || !mono.Images[0].Built {
			t.Errorf("--mono: %+v", mono.Images)
		}

		// an OCI layout of images for another registry, then pushed there from the layout alone
		other := harness.Registry(t)
		elsewhere := copyApp(t, "pushed", other)
		onBase(t, elsewhere, base, harness.DockerList.Platforms())
		layout := filepath.Join(t.TempDir(), "layout")
		inLayout := pushed(t, elsewhere, cache, "--oci-layout", layout, "-k", filepath.Join(layout, "kustomization"))
		sameDigests(t, "--oci-layout", pushedImages, inLayout.out)
		rootfs, _ := harness.Unpacked(t, "oci:"+layout+":"+inLayout.out.Images[0].Tag, "linux/arm64")
		if _, err := os.Stat(filepath.Join(rootfs, "composition/shop-prices/node_modules/@esbuild/linux-arm64/package.json")); err != nil {
			t.Errorf("umoci unpacked no arm64 esbuild from the layout: %v", err)
		}
		fromLayout := pushFromLayout(t, layout, filepath.Join(t.TempDir(), "deployment"))
		readPushed(t, fromLayout)
		sameDigests(t, "--from-oci-layout", pushedImages, fromLayout)

		// the base named by a host nobody answers, read from a mirror, into a registry of its
		// own (in addr the same base content has its tags already)
		addr := harness.Registry(t)
		dir = copyApp(t, "pushed", addr)
		mirrored := addr + "/mirror/bases/node:" + string(harness.DockerList)
		if err := remote.Push(mustRef(t, mirrored), harness.Base(t, harness.DockerList)); err != nil {
			t.Fatal(err)
		}
		onBase(t, dir, "registry.invalid/bases/node:"+string(harness.DockerList), harness.DockerList.Platforms())
		viaMirror := pushed(t, dir, cache, "--mirror", "registry.invalid="+addr+"/mirror")
		// and again after a change of code, over the dependencies images of the first push
		appendLine(t, filepath.Join(dir, "components/shop.orders/operations.js"), "// a one-line change\n")
		changed := pushed(t, dir, cache, "--mirror", "registry.invalid="+addr+"/mirror")
		for _, run := range []pushRun{viaMirror, changed} {
			for _, img := range run.out.Images {
				if !img.Built {
					continue
				}
				r := run.reads[img.Name]
				if r.Annotations[image.AnnotationBaseName] != "registry.invalid/bases/node:docker-list" || r.Annotations[image.AnnotationBaseMirror] != mirrored {
					t.Errorf("%s: the index does not say where its base was read: %v", img.Name, r.Annotations)
				}
				for _, p := range img.Platforms {
					if a := r.Image(t, p).Annotations; a[image.AnnotationBaseDigest] == "" || a[image.AnnotationBaseMirror] != mirrored {
						t.Errorf("%s for %s: the manifest does not say where its base was read: %v", img.Name, p, a)
					}
				}
			}
		}
		if !changed.out.Images[0].Built || changed.out.Images[0].DepsBuilt {
			t.Errorf("a change of code: %+v", changed.out.Images[0])
		}

		// extension services, built as compositions are, on the same base
		portal := copyApp(t, "extended", addr)
		onBase(t, portal, base, []string{"linux/amd64"})
		services := push(t, portal, cache)
		var names []string
		for _, img := range services.Images {
			names = append(names, img.Name)
		}
		if !slices.Contains(names, "extension-exposition-gateway") {
			t.Errorf("no service image among %v", names)
		}
	})
}

// onBase makes the application's images stand on base, for the platforms given.
func onBase(t *testing.T, dir, base string, platforms []string) {
	t.Helper()
	file := filepath.Join(dir, "context.toa.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		switch key := strings.TrimSpace(line); {
		case strings.HasPrefix(key, "image:"):
			line = line[:strings.Index(line, "image:")] + "image: " + base
		case strings.HasPrefix(key, "platforms:"):
			line = line[:strings.Index(line, "platforms:")] + "platforms: [" + strings.Join(platforms, ", ") + "]"
		}
		lines = append(lines, line)
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
