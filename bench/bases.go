package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// The base of the push benchmarks, which toa-push and buildah both build on: Debian's minbase
// with the machine's node and npm (bench/rootfs.sh), one layer per platform, pushed as an OCI
// index. It has a shell and npm, as the 289 Dockerfiles need.
const debianBase = "bases/debian-node:bench"

// pushDebianBase pushes the rootfs tarballs (platform → file) as one index to addr.
func pushDebianBase(addr, nodeVersion string, rootfs map[string]string) (string, error) {
	ref := addr + "/" + debianBase
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	config, err := runnerNpmConfig()
	if err != nil {
		return "", err
	}
	for _, platform := range []string{"linux/amd64", "linux/arm64"} {
		file, ok := rootfs[platform]
		if !ok {
			continue
		}
		layer, err := tarball.LayerFromFile(file, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return "", err
		}
		p := parsePlatform(platform)
		img, err := baseImage(p, nodeVersion, "debootstrap bookworm minbase, node and npm in /usr/local, user node", layer)
		if err != nil {
			return "", err
		}
		if config != nil {
			img, err = mutate.Append(img, mutate.Addendum{Layer: config, MediaType: types.OCILayer,
				History: v1.History{Created: v1.Time{Time: time.Unix(0, 0).UTC()}, CreatedBy: "toa-deploy bench base: the runner's global npm configuration"}})
			if err != nil {
				return "", err
			}
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return ref, writeIndex(ref, idx)
}

// pushThreePlatformBase pushes the test base of internal/harness with a third entry,
// linux/arm/v7, made of the arm64 image's layers under an arm/v7 config: never run, it gives
// the scale benchmark the three default platforms.
func pushThreePlatformBase(addr string) (string, error) {
	ref := addr + "/bases/node:three"
	base, err := harness.BuildBaseIndex()
	if err != nil {
		return "", err
	}
	m, err := base.IndexManifest()
	if err != nil {
		return "", err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, d := range m.Manifests {
		img, err := base.Image(d.Digest)
		if err != nil {
			return "", err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
		if d.Platform.Architecture != "arm64" {
			continue
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return "", err
		}
		cfg = cfg.DeepCopy()
		cfg.Architecture, cfg.Variant = "arm", "v7"
		arm, err := mutate.ConfigFile(img, cfg)
		if err != nil {
			return "", err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}}})
	}
	return ref, writeIndex(ref, idx)
}

// runnerNpmConfig is a layer with the runner's global npm configuration as the base's npm reads
// it (/usr/local/etc/npmrc) and the CA files it names (cafile=): toa-push's npm runs on the
// runner with that configuration, so npm in buildah's RUN gets the same (behind a TLS-inspecting
// proxy, as here, npm reaches no registry without its CA). Nil when npm has no global config.
func runnerNpmConfig() (v1.Layer, error) {
	out, err := exec.Command("npm", "config", "get", "globalconfig").Output()
	if err != nil {
		return nil, fmt.Errorf("npm config get globalconfig: %w", err)
	}
	data, err := os.ReadFile(strings.TrimSpace(string(out)))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"usr/local/etc/npmrc": data}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.TrimSpace(k) == "cafile" {
			path := strings.Trim(strings.TrimSpace(v), `"`)
			ca, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			files[strings.TrimPrefix(path, "/")] = ca
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	for _, n := range names {
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		tw.Write(files[n])
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil },
		tarball.WithMediaType(types.OCILayer))
}

func baseImage(p v1.Platform, nodeVersion, comment string, layer v1.Layer) (v1.Image, error) {
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: p.Architecture, Variant: p.Variant, OS: p.OS, Created: epoch,
		RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_VERSION=" + nodeVersion},
			Cmd: []string{"node"},
		},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: epoch, CreatedBy: "toa-deploy bench base: " + comment}})
}

func parsePlatform(s string) v1.Platform {
	parts := strings.Split(s, "/")
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) > 2 {
		p.Variant = parts[2]
	}
	return p
}

func writeIndex(ref string, idx v1.ImageIndex) error {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}
