package harness

// Readers that are not ours: what toa-push writes is read back by clients that share no code
// with go-containerregistry, as a user's runtime would read it. Debian's skopeo (containers/image,
// the library of podman, buildah and CRI-O) reads every image, platform by platform, and copies
// one into an OCI layout; umoci (the OCI image tools) unpacks that; podman (with runc) runs one.
// testdata/readers/install.sh installs them; `make test` runs it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// readersInstall is what a test that finds no reader is told to run.
const readersInstall = "run `bash testdata/readers/install.sh` (Debian's skopeo, umoci, podman and runc), " +
	"or `make test`, which runs it"

// Media types, spelt out rather than taken from go-containerregistry: the point of these checks
// is that they do not share its code.
const (
	mediaOCIIndex     = "application/vnd.oci.image.index.v1+json"
	mediaOCIManifest  = "application/vnd.oci.image.manifest.v1+json"
	mediaOCIConfig    = "application/vnd.oci.image.config.v1+json"
	mediaDockerList   = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaDockerImage  = "application/vnd.docker.distribution.manifest.v2+json"
	mediaDockerConfig = "application/vnd.docker.container.image.v1+json"
)

// the layer types of each family
var (
	ociLayers    = []string{"application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar+zstd"}
	dockerLayers = []string{"application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.docker.image.rootfs.diff.tar"}
)

// Read is what skopeo read of a reference: the index or manifest it names and, for an index,
// each image it lists.
type Read struct {
	Ref         string
	MediaType   string
	Annotations map[string]string // of the index
	Images      []ReadImage
}

// ReadImage is one image as skopeo read it.
type ReadImage struct {
	Platform    string // "linux/amd64", "linux/arm64/v8"; "unknown/unknown" for an attestation
	Digest      string
	MediaType   string
	ConfigType  string
	LayerTypes  []string
	Layers      []string          // their digests
	Annotations map[string]string // of the manifest
	Config      struct {
		Architecture, OS, Variant string
		Config                    struct {
			Cmd, Entrypoint, Env []string
			WorkingDir           string
		}
	}
}

// Skopeo reads ref (a tag or a digest in a plain-HTTP test registry) with Debian's skopeo: the
// index or manifest as the registry serves it, then every image it lists, by platform, as
// containers/image parses an image to pull it (`skopeo inspect --override-arch ...`: it refuses,
// among others, a Docker manifest of OCI layers), with its config. The test fails on anything
// skopeo refuses and on a manifest that mixes Docker's and OCI's types or has annotations where
// its format has none (Docker's). It returns what was read.
func Skopeo(t testing.TB, ref string) *Read {
	t.Helper()
	return read(t, registrySource{ref: ref})
}

// SkopeoLayout reads the index tagged tag (its org.opencontainers.image.ref.name) in the OCI
// layout dir as Skopeo reads a registry's: through skopeo's oci: transport, the manifests of its
// images from the layout's blobs.
func SkopeoLayout(t testing.TB, dir, tag string) *Read {
	t.Helper()
	return read(t, layoutSource{dir: dir, tag: tag})
}

// source is where skopeo reads: a registry, or an OCI layout.
type source interface {
	name() string
	transport() string                      // what skopeo takes: docker://REF, oci:DIR:TAG
	flags() []string                        // for skopeo inspect
	manifest(digest string) ([]byte, error) // a manifest of the index, by digest
	digestRef(digest string) string         // skopeo's name of a manifest by digest, or ""
}

type registrySource struct{ ref string }

func (r registrySource) name() string      { return r.ref }
func (r registrySource) transport() string { return "docker://" + r.ref }
func (r registrySource) flags() []string   { return []string{"--tls-verify=false"} }
func (r registrySource) digestRef(digest string) string {
	return "docker://" + repository(r.ref) + "@" + digest
}
func (r registrySource) manifest(digest string) ([]byte, error) {
	return runReader(nil, "skopeo", "inspect", "--raw", "--tls-verify=false", r.digestRef(digest))
}

type layoutSource struct{ dir, tag string }

func (l layoutSource) name() string            { return "oci:" + l.dir + ":" + l.tag }
func (l layoutSource) transport() string       { return "oci:" + l.dir + ":" + l.tag }
func (l layoutSource) flags() []string         { return nil }
func (l layoutSource) digestRef(string) string { return "" } // skopeo 1.9's oci: names tags only
func (l layoutSource) manifest(digest string) ([]byte, error) {
	algorithm, hex, _ := strings.Cut(digest, ":")
	return os.ReadFile(filepath.Join(l.dir, "blobs", algorithm, hex))
}

func read(t testing.TB, src source) *Read {
	t.Helper()
	raw := skopeoJSON(t, append(append([]string{"inspect", "--raw"}, src.flags()...), src.transport())...)
	r := &Read{Ref: src.name(), MediaType: str(raw["mediaType"]), Annotations: annotations(raw)}
	manifests, isIndex := raw["manifests"].([]any)
	if !isIndex {
		r.Images = append(r.Images, readImage(t, src, raw, ""))
		return r
	}
	if r.MediaType != mediaOCIIndex && r.MediaType != mediaDockerList {
		t.Errorf("skopeo: %s is a %q, neither an OCI index nor a Docker manifest list", r.Ref, r.MediaType)
	}
	if _, has := raw["annotations"]; has && r.MediaType == mediaDockerList {
		t.Errorf("skopeo: the Docker manifest list %s has annotations, which its format does not have", r.Ref)
	}
	for _, m := range manifests {
		d, _ := m.(map[string]any)
		p, _ := d["platform"].(map[string]any)
		platform := str(p["os"]) + "/" + str(p["architecture"])
		if v := str(p["variant"]); v != "" {
			platform += "/" + v
		}
		if r.MediaType == mediaDockerList {
			if _, has := d["annotations"]; has {
				t.Errorf("skopeo: %s: the Docker manifest list's entry for %s has annotations", r.Ref, platform)
			}
			if str(d["mediaType"]) != mediaDockerImage {
				t.Errorf("skopeo: %s: the Docker manifest list lists a %s for %s", r.Ref, d["mediaType"], platform)
			}
		}
		data, err := src.manifest(str(d["digest"]))
		if err != nil {
			t.Fatalf("skopeo: %s: read the manifest %s for %s: %v\n%s", r.Ref, d["digest"], platform, err, data)
		}
		var child map[string]any
		if err := json.Unmarshal(data, &child); err != nil {
			t.Fatalf("%s: the manifest %s: %v", r.Ref, d["digest"], err)
		}
		img := readImage(t, src, child, platform)
		img.Digest = str(d["digest"])
		if img.MediaType != str(d["mediaType"]) {
			t.Errorf("skopeo: %s: the index lists %s as a %s, its manifest says %s", r.Ref, platform, d["mediaType"], img.MediaType)
		}
		r.Images = append(r.Images, img)
	}
	return r
}

// RequireOCI fails the test unless everything read is OCI: an OCI index (or manifest) of OCI
// manifests, each with an OCI config and OCI layers. That is what toa-push writes.
func (r *Read) RequireOCI(t testing.TB) {
	t.Helper()
	if r.MediaType != mediaOCIIndex && r.MediaType != mediaOCIManifest {
		t.Errorf("%s is a %s, not OCI", r.Ref, r.MediaType)
	}
	for _, img := range r.Images {
		if img.MediaType != mediaOCIManifest || img.ConfigType != mediaOCIConfig {
			t.Errorf("%s for %s: a %s with a %s config, not OCI", r.Ref, img.Platform, img.MediaType, img.ConfigType)
		}
	}
}

// Platforms are the platforms of the images read, attestations (unknown/unknown) left out.
func (r *Read) Platforms() []string {
	var out []string
	for _, img := range r.Images {
		if !strings.HasPrefix(img.Platform, "unknown/") {
			out = append(out, img.Platform)
		}
	}
	return out
}

// Image returns the image read for the platform ("linux/amd64"), or fails the test.
func (r *Read) Image(t testing.TB, platform string) ReadImage {
	t.Helper()
	for _, img := range r.Images {
		if img.Platform == platform || strings.TrimSuffix(img.Platform, "/v8") == platform {
			return img
		}
	}
	t.Fatalf("skopeo: %s has no image for %s (it has %v)", r.Ref, platform, r.Platforms())
	return ReadImage{}
}

// readImage reads one image of src from its manifest: then, as containers/image pulls it (for
// the platform, when src is an index), its parsed manifest and its config.
func readImage(t testing.TB, src source, raw map[string]any, platform string) ReadImage {
	t.Helper()
	img := ReadImage{Platform: platform, MediaType: str(raw["mediaType"])}
	config, _ := raw["config"].(map[string]any)
	img.ConfigType = str(config["mediaType"])
	layers, _ := raw["layers"].([]any)
	for _, l := range layers {
		layer, _ := l.(map[string]any)
		img.LayerTypes = append(img.LayerTypes, str(layer["mediaType"]))
		img.Layers = append(img.Layers, str(layer["digest"]))
	}
	img.Annotations = annotations(raw)
	checkFamily(t, src.name()+" "+platform, img, raw)
	if strings.HasPrefix(platform, "unknown/") {
		return img // an attestation: no platform to pull
	}
	// the image as a pull for this platform sees it: containers/image parses the manifest and
	// the config, and refuses what it does not support
	args := src.flags()
	if platform != "" {
		parts := strings.Split(platform, "/")
		args = append(args, "--override-os", parts[0], "--override-arch", parts[1])
		if len(parts) == 3 {
			args = append(args, "--override-variant", parts[2])
		}
	}
	pulled := skopeoJSON(t, append(append([]string{"inspect"}, args...), src.transport())...)
	var got []string
	for _, l := range pulled["Layers"].([]any) {
		got = append(got, str(l))
	}
	if !slices.Equal(got, img.Layers) {
		t.Errorf("skopeo: a pull of %s for %s gets the layers %v, the image listed for it has %v", src.name(), platform, got, img.Layers)
	}
	if platform == "" {
		img.Digest = str(pulled["Digest"])
	}
	out := skopeo(t, append(append([]string{"inspect", "--config"}, args...), src.transport())...)
	if err := json.Unmarshal(out, &img.Config); err != nil {
		t.Fatalf("skopeo inspect --config %s: %v\n%s", src.name(), err, out)
	}
	if platform == "" {
		img.Platform = img.Config.OS + "/" + img.Config.Architecture
		if img.Config.Variant != "" {
			img.Platform += "/" + img.Config.Variant
		}
	} else if got := img.Config.OS + "/" + img.Config.Architecture; !strings.HasPrefix(platform, got) {
		t.Errorf("skopeo: %s: the index says %s, the config %s", src.name(), platform, got)
	}
	return img
}

// Tags lists the tags of a repository ("127.0.0.1:PORT/shop/composition-front") with skopeo.
func Tags(t testing.TB, repository string) []string {
	t.Helper()
	var out struct{ Tags []string }
	data := skopeo(t, "list-tags", "--tls-verify=false", "docker://"+repository)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("skopeo list-tags %s: %v\n%s", repository, err, data)
	}
	return out.Tags
}

// checkFamily fails the test on a manifest that mixes Docker's and OCI's types, or has
// annotations in Docker's format, which has none.
func checkFamily(t testing.TB, what string, img ReadImage, raw map[string]any) {
	t.Helper()
	var config string
	var layers []string
	switch img.MediaType {
	case mediaOCIManifest:
		config, layers = mediaOCIConfig, ociLayers
		if img.ConfigType != mediaOCIConfig && !strings.HasPrefix(img.Platform, "unknown/") {
			t.Errorf("skopeo: %s: an OCI manifest with a %s config", what, img.ConfigType)
		}
	case mediaDockerImage:
		config, layers = mediaDockerConfig, dockerLayers
		if img.ConfigType != config {
			t.Errorf("skopeo: %s: a Docker manifest with a %s config", what, img.ConfigType)
		}
		if _, has := raw["annotations"]; has {
			t.Errorf("skopeo: %s: a Docker manifest with annotations, which its format does not have", what)
		}
	default:
		t.Errorf("skopeo: %s is a %q, neither an OCI nor a Docker v2 image manifest", what, img.MediaType)
		return
	}
	for _, l := range img.LayerTypes {
		if !slices.Contains(layers, l) && !(strings.HasPrefix(img.Platform, "unknown/") && l == "application/vnd.in-toto+json") {
			t.Errorf("skopeo: %s: a %s with a layer of type %s", what, img.MediaType, l)
		}
	}
}

// Unpacked copies the image of ref (in a registry, or "oci:DIR:TAG") for the platform
// ("linux/amd64") into an OCI layout with
// skopeo, unpacks it with umoci into an OCI runtime bundle, and returns the bundle's root file
// system and its config.json's process (args, env, cwd).
func Unpacked(t testing.TB, ref, platform string) (rootfs string, process BundleProcess) {
	t.Helper()
	dir := t.TempDir()
	layout, bundle := filepath.Join(dir, "layout"), filepath.Join(dir, "bundle")
	parts := strings.Split(platform, "/")
	args := []string{"copy", "--insecure-policy", "--src-tls-verify=false", "--override-os", parts[0], "--override-arch", parts[1]}
	if len(parts) == 3 {
		args = append(args, "--override-variant", parts[2])
	}
	// umoci 0.4.7 (Debian 12's) unpacks gzip layers only: skopeo recompresses zstd ones, which
	// it reads whole to do so
	args = append(args, "--dest-compress", "--dest-compress-format", "gzip")
	from := ref
	if !strings.HasPrefix(ref, "oci:") {
		from = "docker://" + ref
	}
	skopeo(t, append(args, from, "oci:"+layout+":image")...)
	umoci := lookReader(t, "umoci")
	if out, err := runReader(t, umoci, "unpack", "--image", layout+":image", bundle); err != nil {
		t.Fatalf("umoci unpack %s (%s, copied by skopeo): %v\n%s", ref, platform, err, out)
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct{ Process BundleProcess }
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("umoci's config.json: %v", err)
	}
	return filepath.Join(bundle, "rootfs"), spec.Process
}

// BundleProcess is the process of an OCI runtime bundle's config.json.
type BundleProcess struct {
	Args []string
	Env  []string
	Cwd  string
}

// Podman runs the image of ref for linux/amd64 with podman (runc, storage in a temporary folder,
// no network) and returns what it printed and its exit code. The flags are those that let a
// container start on the machines this was written on: runc, as crun did not start one; vfs
// storage, which needs nothing of the kernel (overlay was not tried); cgroupfs, as no systemd
// runs; events to a file; and ulimits below the machine's, since the tests' root lacks
// CAP_SYS_RESOURCE and runc could not set podman's defaults for root (nofile and nproc far above
// the machine's hard limits: "error setting rlimit type 7: operation not permitted").
func Podman(t testing.TB, ref string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	podman := lookReader(t, "podman")
	lookReader(t, "runc")
	dir, err := os.MkdirTemp("", "podman-") // podman wants a runroot of 50 characters at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	argv := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
		"run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--tls-verify=false", "--platform", "linux/amd64", ref}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, podman, append(argv, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("podman run %s: %v", ref, err)
	}
	return out.String(), errOut.String(), code
}

func skopeo(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := runReader(t, lookReader(t, "skopeo"), args...)
	if err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func skopeoJSON(t testing.TB, args ...string) map[string]any {
	t.Helper()
	out := skopeo(t, args...)
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// runReader runs a reader for at most two minutes and returns its stdout, or its stderr with
// the error.
func runReader(t testing.TB, bin string, args ...string) ([]byte, error) {
	ctx := context.Background()
	if t != nil {
		ctx = t.Context()
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stderr.Bytes(), err
	}
	return stdout.Bytes(), nil
}

func lookReader(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test reads images with " + name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("no %s on PATH: %s", name, readersInstall)
	}
	return p
}

// repository is ref without its tag or digest.
func repository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}

// annotations are those of a manifest or an index, or nil.
func annotations(raw map[string]any) map[string]string {
	a, ok := raw["annotations"].(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for k, v := range a {
		out[k] = str(v)
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
