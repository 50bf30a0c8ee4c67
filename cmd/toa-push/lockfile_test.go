package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
)

// What npm's registry says of ms's two versions: the integrity the lockfiles of
// testdata/apps/shrinkwrap carry.
const (
	ms212 = "sha512-sGkPx+VjMtmA6MX27oA4FBFELFCZZ4S4XqeGOXCv68tT+jb3vk/RyaKWP0PTKyWtmLSM0b+adUTEvbs1PEaH2w=="
	ms213 = "sha512-6FlzubTLZG3J2a/NVCAleEhjzq5oxgHyaCU9yYXvcLsvoVaHJq/s5xXI6/XXP6tz7R9xAOtHnSO/tXtF3WRTlA=="
)

// npm reads npm-shrinkwrap.json over package-lock.json, and toa-push chooses the lockfile once,
// as npm does, for the install, the dependencies image's tag and the SBOM (issue 37). A component
// with both (testdata/apps/shrinkwrap) is pushed with its shrinkwrap as stale as its
// package-lock.json (ms 2.1.2), then with the shrinkwrap at 2.1.3 and the package-lock.json left
// at 2.1.2: the second push builds a new dependencies image (a tag of the package-lock.json alone
// took the first one again, ms 2.1.2 and all), whose node_modules/ms/package.json says 2.1.3, and
// the SPDX document attached to the image, read with oras, lists ms 2.1.3 with 2.1.3's checksum.
func TestShrinkwrapOverPackageLock(t *testing.T) {
	oras := harness.Tool(t, "oras") // skipped under -short; found before TOA_CACHE moves
	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "shrinkwrap", addr)
	component := filepath.Join(dir, "components", "shop.locked")
	shrinkwrap := filepath.Join(component, "npm-shrinkwrap.json")
	locked, err := os.ReadFile(shrinkwrap)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := os.ReadFile(filepath.Join(component, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()

	if err := os.WriteFile(shrinkwrap, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	first := pushLocked(t, dir, cache)
	if v := installedVersion(t, first.Reference, "ms"); v != "2.1.2" {
		t.Fatalf("with both lockfiles at ms 2.1.2, the image has ms %q", v)
	}

	if err := os.WriteFile(shrinkwrap, locked, 0o644); err != nil {
		t.Fatal(err)
	}
	second := pushLocked(t, dir, cache)
	if !second.DepsBuilt {
		t.Errorf("the shrinkwrap moved to ms 2.1.3 and the dependencies image was not built: the one of ms 2.1.2 was taken again")
	}
	if v := installedVersion(t, second.Reference, "ms"); v != "2.1.3" {
		t.Errorf("the image has ms %q, the shrinkwrap locks 2.1.3 (the stale package-lock.json 2.1.2)", v)
	}
	repo, _, _ := strings.Cut(second.Reference, "@")
	sboms := 0
	for _, a := range second.Attachments {
		if a.Kind != "sbom" {
			continue
		}
		sboms++
		got := spdxPackage(t, oras, repo+"@"+a.Digest, "ms")
		if got.VersionInfo != "2.1.3" || got.checksum("SHA512") != integrityHex(t, ms213) {
			t.Errorf("the SBOM on %s lists ms %s with the SHA512 %s, want 2.1.3 with %s (2.1.2's is %s)", a.Subject,
				got.VersionInfo, got.checksum("SHA512"), integrityHex(t, ms213), integrityHex(t, ms212))
		}
	}
	if sboms != 2 {
		t.Errorf("%d SBOMs attached, want one on the image and one on the index: %+v", sboms, second.Attachments)
	}
}

// lockedImage is what toa-push -o json says of the one image of testdata/apps/shrinkwrap.
type lockedImage struct {
	Reference   string             `json:"reference"`
	DepsBuilt   bool               `json:"dependenciesBuilt"`
	Attachments []image.Attachment `json:"attachments"`
}

func pushLocked(t *testing.T, dir, cache string) lockedImage {
	t.Helper()
	t.Setenv("TOA_CACHE", cache)
	code, stdout, stderr := run(t, dir, "-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment"))
	if code != 0 {
		t.Fatalf("toa-push exited %d:\n%s", code, stderr)
	}
	var out struct {
		Images []lockedImage `json:"images"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Images) != 1 {
		t.Fatalf("toa-push -o json: %v\n%s", err, stdout)
	}
	return out.Images[0]
}

// installedVersion is the version of the package in the image's node_modules of shop.locked, as
// its package.json there says.
func installedVersion(t *testing.T, ref, pkg string) string {
	t.Helper()
	idx, m := index(t, ref)
	file := "composition/shop-locked/node_modules/" + pkg + "/package.json"
	data := fileOf(t, platformImage(t, idx, m, "amd64"), empty.Image, file)
	if data == "" {
		t.Fatalf("%s: no %s", ref, file)
	}
	var p struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		t.Fatalf("%s: %s: %v", ref, file, err)
	}
	return p.Version
}

// spdxEntry is a package of an SPDX 2.3 document.
type spdxEntry struct {
	Name        string `json:"name"`
	VersionInfo string `json:"versionInfo"`
	Checksums   []struct {
		Algorithm     string `json:"algorithm"`
		ChecksumValue string `json:"checksumValue"`
	} `json:"checksums"`
}

func (e spdxEntry) checksum(algorithm string) string {
	for _, c := range e.Checksums {
		if c.Algorithm == algorithm {
			return c.ChecksumValue
		}
	}
	return ""
}

// spdxPackage pulls the SPDX document attached as ref with oras (not our reader) and returns
// its one package named name.
func spdxPackage(t *testing.T, oras, ref, name string) spdxEntry {
	t.Helper()
	dir := t.TempDir()
	if o, err := tool(t, oras, "pull", "--plain-http", "-o", dir, ref); err != nil {
		t.Fatalf("oras pull %s: %v\n%s", ref, err, o)
	}
	data, err := os.ReadFile(filepath.Join(dir, "sbom.spdx.json"))
	if err != nil {
		t.Fatalf("oras pull %s: %v", ref, err)
	}
	var doc struct {
		SPDXVersion string      `json:"spdxVersion"`
		Packages    []spdxEntry `json:"packages"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || doc.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("%s is no SPDX 2.3 document (%v):\n%.2000s", ref, err, data)
	}
	var found []spdxEntry
	for _, p := range doc.Packages {
		if p.Name == name {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s lists %d packages named %s: %+v", ref, len(found), name, found)
	}
	return found[0]
}

// integrityHex is the hex of an npm integrity's digest, as SPDX writes checksums.
func integrityHex(t *testing.T, integrity string) string {
	t.Helper()
	sum, err := base64.StdEncoding.DecodeString(integrity[len("sha512-"):])
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(sum)
}
