package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
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
		// two platforms: an SBOM each (every package), attached to its image and to the index, the
		// provenance, and signatures of the index, the two platforms' images and the five referrers
		if kinds["sbom"] != 4 || kinds["provenance"] != 1 || kinds["signature"] != 8 {
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

// The SBOMs toa-push attaches are read whole by a consumer we did not write: `syft convert` of
// each referrer alone (as Trivy's --sbom-sources oci, Dependency-Track and Kyverno read the
// one document they are given) lists every package of the components' lockfiles installed for
// the platform, at its version, in SPDX and in CycloneDX; and `syft scan` of the pushed image,
// from the registry, finds no npm package that the SBOM lacks.
func TestSBOMReadBySyft(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm, oras and syft")
	}
	oras, syft := harness.Tool(t, "oras"), harness.Tool(t, "syft")
	t.Setenv("TOA_CACHE", t.TempDir()) // one layer cache for both formats: npm installs once
	for _, format := range []string{"spdx", "cyclonedx"} {
		t.Run(format, func(t *testing.T) {
			addr := harness.Registry(t)
			harness.PushTestBase(t, addr)
			dir := copyApp(t, "pushed", addr)
			code, stdout, stderr := run(t, dir, "-o", "json", "--sbom", format, "--path", dir, "-k", filepath.Join(dir, "deployment"))
			if code != 0 {
				t.Fatalf("toa-push exited %d:\n%s", code, stderr)
			}
			var out attestedOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("%v\n%s", err, stdout)
			}
			file := map[string]string{"spdx": "sbom.spdx.json", "cyclonedx": "sbom.cdx.json"}[format]
			// the components of each image of testdata/apps/pushed
			components := map[string][]string{"composition-front": {"shop.orders", "shop.prices"}, "composition-shop-stats": {"shop.stats"}}
			for _, img := range out.Images {
				repo, _, _ := strings.Cut(img.Reference, "@")
				if _, ok := components[img.Name]; !ok {
					t.Fatalf("an image the test does not know: %s", img.Name)
				}
				for _, a := range img.Attachments {
					if a.Kind != "sbom" {
						continue
					}
					listed := syftConvert(t, syft, oras, repo+"@"+a.Digest, file)
					for name, version := range lockedFor(t, dir, components[img.Name], a.Platform) {
						if !listed[name+"@"+version] {
							t.Errorf("%s %s on %s: syft convert lists no %s@%s", img.Name, a.Platform, a.Subject, name, version)
						}
					}
					if a.Platform != "linux/amd64" || a.Subject == img.Digest {
						continue
					}
					// what a scanner finds in the image's layers, the base's too; a package.json
					// without a version (a component's) is syft's name@UNKNOWN
					for _, found := range syftScan(t, syft, repo+"@"+a.Subject) {
						name, version, _ := strings.Cut(found[1:], "@")
						name = found[:1] + name
						if !listed[found] && !(version == "UNKNOWN" && listed[name+"@"]) {
							t.Errorf("%s %s: syft scan finds %s, which the SBOM lacks", img.Name, a.Platform, found)
						}
					}
				}
			}
		})
	}
}

// syftConvert pulls one attached document with oras and reads it with `syft convert`; it returns
// the npm packages syft read from it, as name@version.
func syftConvert(t *testing.T, syft, oras, ref, file string) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	if o, err := tool(t, oras, "pull", "--plain-http", "-o", dir, ref); err != nil {
		t.Fatalf("oras pull %s: %v\n%s", ref, err, o)
	}
	cmd := exec.CommandContext(t.Context(), syft, "convert", filepath.Join(dir, file), "-o", "syft-json", "-q")
	cmd.Env = syftEnv(t)
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("syft convert %s (%s): %v", file, ref, err)
	}
	return npmPackages(t, data)
}

// syftScan scans the image in the test registry with `syft scan` and returns the npm packages it
// finds, as name@version.
func syftScan(t *testing.T, syft, ref string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), syft, "scan", "registry:"+ref, "-o", "syft-json", "-q")
	cmd.Env = append(syftEnv(t), "SYFT_REGISTRY_INSECURE_USE_HTTP=true")
	data, err := cmd.Output()
	if err != nil {
		var stderr string
		if e, ok := err.(*exec.ExitError); ok {
			stderr = string(e.Stderr)
		}
		t.Fatalf("syft scan %s: %v\n%s", ref, err, stderr)
	}
	var out []string
	for p := range npmPackages(t, data) {
		out = append(out, p)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("syft scan %s found no npm package at all", ref)
	}
	return out
}

func syftEnv(t *testing.T) []string {
	return append(os.Environ(), "HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir(), "SYFT_CHECK_FOR_APP_UPDATE=false",
		"XDG_CACHE_HOME="+t.TempDir())
}

// npmPackages reads syft's JSON: the packages of type npm, as name@version.
func npmPackages(t *testing.T, data []byte) map[string]bool {
	t.Helper()
	var doc struct {
		Artifacts []struct {
			Name, Version, Type, PURL string
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("syft's JSON: %v\n%.2000s", err, data)
	}
	out := map[string]bool{}
	for _, a := range doc.Artifacts {
		if a.Type == "npm" || strings.HasPrefix(a.PURL, "pkg:npm/") {
			out[a.Name+"@"+a.Version] = true
		}
		// and as its purl names it: a component's SPDX name is its Toa id, its purl its package's
		if p, ok := strings.CutPrefix(a.PURL, "pkg:npm/"); ok {
			p, _, _ = strings.Cut(p, "?")
			p = strings.Replace(p, "%40", "@", 1)
			name, version, _ := strings.Cut(p[1:], "@")
			out[p[:1]+name+"@"+version] = true
		}
	}
	return out
}

// lockedFor are the packages the components' lockfiles pin that npm installs for the platform
// (an @esbuild binary is another platform's unless it is the platform's own).
func lockedFor(t *testing.T, app string, components []string, platform string) map[string]string {
	t.Helper()
	own := "@esbuild/linux-" + map[string]string{"linux/amd64": "x64", "linux/arm64": "arm64"}[platform]
	out := map[string]string{}
	for _, c := range components {
		data, err := os.ReadFile(filepath.Join(app, "components", c, "package-lock.json"))
		if os.IsNotExist(err) {
			continue // a component without dependencies
		}
		if err != nil {
			t.Fatal(err)
		}
		var lock struct {
			Packages map[string]struct {
				Version string
				Dev     bool
			} `json:"packages"`
		}
		if err := json.Unmarshal(data, &lock); err != nil {
			t.Fatal(err)
		}
		for p, e := range lock.Packages {
			name := strings.TrimPrefix(p, "node_modules/")
			if p == "" || e.Dev || strings.HasPrefix(name, "@esbuild/") && name != own {
				continue
			}
			out[name] = e.Version
		}
	}
	return out
}
