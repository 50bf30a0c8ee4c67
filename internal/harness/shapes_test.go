package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every shape of test base, pushed to a real registry and read back by skopeo as a pull would
// read it; the amd64 image of each copied by skopeo and unpacked by umoci.
func TestBaseShapesReadBySkopeoAndUmoci(t *testing.T) {
	addr := Registry(t)
	for _, shape := range BaseShapes {
		t.Run(string(shape), func(t *testing.T) {
			ref := PushBase(t, addr, shape)
			r := Skopeo(t, ref)
			want := map[BaseShape][3]string{ // the index's type, the images', their layers' (prefix)
				OCIIndex:         {mediaOCIIndex, mediaOCIManifest, "application/vnd.oci.image.layer.v1.tar+gzip"},
				OCIIndexOfDocker: {mediaOCIIndex, mediaDockerImage, "application/vnd.docker.image.rootfs.diff.tar.gzip"},
				DockerList:       {mediaDockerList, mediaDockerImage, "application/vnd.docker.image.rootfs.diff.tar.gzip"},
				OCIImage:         {mediaOCIManifest, mediaOCIManifest, "application/vnd.oci.image.layer.v1.tar+gzip"},
				DockerImage:      {mediaDockerImage, mediaDockerImage, "application/vnd.docker.image.rootfs.diff.tar.gzip"},
				Buildx:           {mediaOCIIndex, mediaOCIManifest, "application/vnd.oci.image.layer.v1.tar+gzip"},
				Musl:             {mediaOCIIndex, mediaOCIManifest, "application/vnd.oci.image.layer.v1.tar+gzip"},
				Zstd:             {mediaOCIIndex, mediaOCIManifest, "application/vnd.oci.image.layer.v1.tar+zstd"},
			}[shape]
			if r.MediaType != want[0] {
				t.Errorf("%s is a %s, want %s", ref, r.MediaType, want[0])
			}
			var platforms []string
			for _, p := range r.Platforms() {
				platforms = append(platforms, strings.TrimSuffix(p, "/v8"))
			}
			if !slices.Equal(platforms, shape.Platforms()) {
				t.Errorf("platforms %v, want %v", platforms, shape.Platforms())
			}
			attestations := 0
			for _, img := range r.Images {
				if strings.HasPrefix(img.Platform, "unknown/") {
					attestations++
					if img.MediaType != mediaOCIManifest || !slices.Equal(img.LayerTypes, []string{"application/vnd.in-toto+json"}) {
						t.Errorf("the attestation %s: %s of %v", img.Digest, img.MediaType, img.LayerTypes)
					}
					continue
				}
				if img.MediaType != want[1] || len(img.LayerTypes) == 0 || img.LayerTypes[0] != want[2] {
					t.Errorf("%s: a %s of %v, want a %s of %s", img.Platform, img.MediaType, img.LayerTypes, want[1], want[2])
				}
			}
			if wantAtt := map[bool]int{true: 2}[shape == Buildx]; attestations != wantAtt {
				t.Errorf("%d attestations, want %d", attestations, wantAtt)
			}
			rootfs, process := Unpacked(t, ref, "linux/amd64")
			for _, f := range []string{"usr/local/bin/node", baseRuntimeDir + "/package.json", "etc/passwd"} {
				if _, err := os.Stat(filepath.Join(rootfs, f)); err != nil {
					t.Errorf("umoci unpacked no %s: %v", f, err)
				}
			}
			_, musl := os.Lstat(filepath.Join(rootfs, "lib/ld-musl-x86_64.so.1"))
			if (musl == nil) != (shape.Libc() == "musl") {
				t.Errorf("musl's loader in a %s base: %v", shape.Libc(), musl == nil)
			}
			if !slices.Equal(process.Args, []string{"node"}) {
				t.Errorf("umoci's bundle runs %v", process.Args)
			}
		})
	}
}
