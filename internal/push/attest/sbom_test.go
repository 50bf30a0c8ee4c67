package attest

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var testBuilder = Builder{Name: "toa-push", Version: "v0.0.0-test"}

// testImage is an image of two components, one with what npm installed for linux/arm64.
func testImage(t *testing.T) *Image {
	t.Helper()
	lock, err := os.Open("testdata/installed/linux-arm64.package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	pkgs, err := parseLockfile(lock)
	if err != nil {
		t.Fatal(err)
	}
	installed := &Install{Root: "composition/shop-orders", Packages: pkgs}
	installed.Packages[0].Resolved = "https://registry.example/@esbuild/linux-arm64/-/linux-arm64-0.25.12.tgz"
	return &Image{
		Repository: "registry.example:5000/shop/composition-front",
		Tag:        "1a2b3c4d",
		Digest:     "sha256:" + strings.Repeat("ab", 32),
		Platform:   "linux/arm64",
		Base:       Base{Reference: "ghcr.io/toa-io/runtime:1.0.0-alpha.289", Digest: "sha256:" + strings.Repeat("cd", 32)},
		Components: []Component{
			{ID: "shop.orders", Label: "shop-orders", Version: "1.0.0", Package: "sbom-user", PackageVersion: "1.2.0",
				Installed: installed, Direct: installed.Direct([]string{"ms", "esbuild", "debug"})},
			{ID: "shop.prices", Label: "shop-prices", Version: "0f1e2d3c"},
		},
		Global: &Install{Root: "usr/local/lib", Packages: []Package{{Name: "@s/p", Version: "1.0.0", Path: "node_modules/@s/p", License: "MIT OR Apache-2.0"},
			{Name: "s-p", Version: "1.0.0", Path: "node_modules/s-p", License: "UNLICENSED"}}},
	}
}

func compileSchema(t *testing.T, file string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	s, err := c.Compile(file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ValidateSPDX checks doc against SPDX 2.3's JSON schema (testdata/schema), and what the schema
// leaves out: identifiers of the form SPDXRef-[A-Za-z0-9.-]+, unique, and relationships between
// elements the document has.
func validateSPDX(t *testing.T, doc []byte) {
	t.Helper()
	if err := spdxSchema(t, doc); err != nil {
		t.Fatalf("the SPDX document does not validate against SPDX 2.3's schema: %v", err)
	}
	var d struct {
		Packages []struct {
			SPDXID string `json:"SPDXID"`
		} `json:"packages"`
		Relationships []struct {
			From string `json:"spdxElementId"`
			To   string `json:"relatedSpdxElement"`
		} `json:"relationships"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	id := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	ids := map[string]bool{"SPDXRef-DOCUMENT": true}
	for _, p := range d.Packages {
		if !id.MatchString(p.SPDXID) || ids[p.SPDXID] {
			t.Errorf("identifier %q is malformed or not unique", p.SPDXID)
		}
		ids[p.SPDXID] = true
	}
	for _, r := range d.Relationships {
		if !ids[r.From] || !ids[r.To] {
			t.Errorf("relationship %s → %s names what the document lacks", r.From, r.To)
		}
	}
}

func spdxSchema(t *testing.T, doc []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return compileSchema(t, "testdata/schema/spdx-2.3.schema.json").Validate(v)
}

// The schema check is a real one: a package without its name, or a checksum of an algorithm
// SPDX does not know, fails it.
func TestSPDXSchemaRefuses(t *testing.T) {
	doc, err := testImage(t).SPDX(testBuilder, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, broken := range [][]byte{
		bytes.Replace(doc, []byte(`"name":"ms",`), nil, 1),
		bytes.Replace(doc, []byte(`"algorithm":"SHA512"`), []byte(`"algorithm":"SHA-512"`), 1),
	} {
		if spdxSchema(t, broken) == nil {
			t.Error("a broken document validates")
		}
	}
}

func TestSPDX(t *testing.T) {
	img := testImage(t)
	doc, err := img.SPDX(testBuilder, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	validateSPDX(t, doc)
	again, _ := testImage(t).SPDX(testBuilder, time.Unix(0, 0))
	if !bytes.Equal(doc, again) {
		t.Error("the same image gave two documents")
	}
	s := string(doc)
	for _, want := range []string{
		`"name":"ms","versionInfo":"2.1.3"`,
		`"name":"@esbuild/linux-arm64","versionInfo":"0.25.12"`,
		`"downloadLocation":"https://registry.example/@esbuild/linux-arm64/-/linux-arm64-0.25.12.tgz"`,
		`"referenceLocator":"pkg:npm/%40esbuild/linux-arm64@0.25.12"`,
		`"algorithm":"SHA512"`,
		`"licenseDeclared":"MIT OR Apache-2.0"`,
		`"name":"shop.orders"`,
		`"name":"ghcr.io/toa-io/runtime:1.0.0-alpha.289"`,
		`"relationshipType":"DESCENDANT_OF"`,
		`"created":"1970-01-01T00:00:00Z"`,
		`"Tool: toa-push-v0.0.0-test"`,
		`"SPDXRef-Package-global-node-modules-s-p-2"`, // "@s/p" and "s-p" clean to the same id
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the document lacks %s", want)
		}
	}
	if strings.Contains(s, "is-number") || strings.Contains(s, "linux-x64") {
		t.Error("the document lists what npm did not install")
	}
	if strings.Contains(s, "UNLICENSED") {
		t.Error("UNLICENSED is not an SPDX license expression")
	}
}

// cycloneDXSchema is CycloneDX 1.6's schema with the two it refers to, each under its $id, so
// that nothing is looked up on the network.
func cycloneDXSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	for _, f := range []string{"bom-1.6.schema.json", "spdx.schema.json", "jsf-0.82.schema.json"} {
		data, err := os.ReadFile("testdata/schema/" + f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource("http://cyclonedx.org/schema/"+f, doc); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Compile("http://cyclonedx.org/schema/bom-1.6.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCycloneDX(t *testing.T) {
	doc, err := testImage(t).CycloneDX(testBuilder, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := cycloneDXSchema(t).Validate(v); err != nil {
		t.Fatalf("the BOM does not validate against CycloneDX 1.6's schema: %v", err)
	}
	broken, _ := jsonschema.UnmarshalJSON(bytes.NewReader(bytes.Replace(doc, []byte(`"type":"library"`), []byte(`"type":"npm"`), 1)))
	if cycloneDXSchema(t).Validate(broken) == nil {
		t.Error("a component of an unknown type validates")
	}
	var bom struct {
		BOMFormat, SpecVersion, SerialNumber string
		Components                           []struct {
			BOMRef  string `json:"bom-ref"`
			Group   string `json:"group"`
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
			Hashes  []struct{ Alg, Content string }
		}
		Dependencies []struct {
			Ref       string   `json:"ref"`
			DependsOn []string `json:"dependsOn"`
		}
	}
	if err := json.Unmarshal(doc, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.6" ||
		!regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(bom.SerialNumber) {
		t.Errorf("header: %s %s %s", bom.BOMFormat, bom.SpecVersion, bom.SerialNumber)
	}
	refs := map[string]bool{"image": true}
	found := false
	for _, c := range bom.Components {
		refs[c.BOMRef] = true
		if c.Group == "@esbuild" && c.Name == "linux-arm64" && c.Version == "0.25.12" && c.PURL == "pkg:npm/%40esbuild/linux-arm64@0.25.12" &&
			len(c.Hashes) == 1 && c.Hashes[0].Alg == "SHA-512" && len(c.Hashes[0].Content) == 128 {
			found = true
		}
	}
	if !found {
		t.Error("esbuild's platform package is missing or incomplete")
	}
	for _, d := range bom.Dependencies {
		for _, on := range append([]string{d.Ref}, d.DependsOn...) {
			if !refs[on] {
				t.Errorf("dependency %s names %s, which the BOM lacks", d.Ref, on)
			}
		}
	}
}

func TestProvenance(t *testing.T) {
	b := &Build{Name: "composition-front", Repository: "registry.example:5000/shop/composition-front", Tag: "1a2b3c4d",
		Digest: "sha256:" + strings.Repeat("01", 32), Context: "shop", Environment: "staging", Runtime: "1.0.0-alpha.289",
		Node: "20.20.2", Npm: "11.19.1",
		Platforms: []PlatformBuild{{Platform: "linux/amd64", Digest: "sha256:" + strings.Repeat("02", 32),
			Base:   Base{Reference: "ghcr.io/toa-io/runtime:1.0.0-alpha.289", Digest: "sha256:" + strings.Repeat("03", 32)},
			Layers: []Layer{{What: "node_modules of shop-orders", Digest: "sha256:" + strings.Repeat("04", 32)}}}},
		Components: []BuildComponent{{ID: "shop.orders", Version: "1.0.0", Files: map[string]string{"package-lock.json": "sha256:" + strings.Repeat("05", 32)}}},
	}
	doc, err := b.Provenance(testBuilder)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			BuildDefinition struct {
				BuildType            string
				ExternalParameters   map[string]any
				ResolvedDependencies []struct {
					URI    string
					Name   string
					Digest map[string]string
				}
			}
			RunDetails struct {
				Builder struct {
					ID      string
					Version map[string]string
				}
			}
		}
	}
	if err := json.Unmarshal(doc, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != "https://slsa.dev/provenance/v1" {
		t.Errorf("statement %s, predicate %s", st.Type, st.PredicateType)
	}
	if len(st.Subject) != 2 || st.Subject[0].Digest["sha256"] != strings.Repeat("01", 32) || st.Subject[1].Digest["sha256"] != strings.Repeat("02", 32) {
		t.Errorf("subjects %+v: want the index, then each platform's image", st.Subject)
	}
	p := st.Predicate
	if p.RunDetails.Builder.ID != BuilderID || p.RunDetails.Builder.Version["toa-push"] != "v0.0.0-test" {
		t.Errorf("builder %+v", p.RunDetails.Builder)
	}
	if p.BuildDefinition.ExternalParameters["context"] != "shop" || p.BuildDefinition.ExternalParameters["environment"] != "staging" {
		t.Errorf("parameters %v", p.BuildDefinition.ExternalParameters)
	}
	deps := p.BuildDefinition.ResolvedDependencies
	if len(deps) != 3 || deps[0].URI != "oci://ghcr.io/toa-io/runtime@sha256:"+strings.Repeat("03", 32) ||
		deps[1].Digest["sha256"] != strings.Repeat("04", 32) || deps[2].Digest["sha256"] != strings.Repeat("05", 32) {
		t.Errorf("resolved dependencies %+v: want the base, the layer, the lockfile", deps)
	}
}

func TestChecksums(t *testing.T) {
	got := checksums("sha1-AAAA sha512-//// md5-AAAA sha256-not*base64")
	if len(got) != 2 || got[0] != (checksum{"SHA1", "000000"}) || got[1] != (checksum{"SHA512", "ffffff"}) {
		t.Errorf("got %v", got)
	}
}

func TestLicenseExpressions(t *testing.T) {
	for l, want := range map[string]string{
		"MIT": "MIT", "(MIT OR Apache-2.0)": "(MIT OR Apache-2.0)", "GPL-2.0-or-later WITH Classpath-exception-2.0": "GPL-2.0-or-later WITH Classpath-exception-2.0",
		"LicenseRef-Custom": "LicenseRef-Custom", "SEE LICENSE IN LICENSE.md": "", "UNLICENSED": "", "": "", "MIT, BSD": "",
	} {
		if got := spdxLicense(l); got != want {
			t.Errorf("spdxLicense(%q) = %q, want %q", l, got, want)
		}
	}
}

func TestBaseRepository(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/toa-io/runtime:1.0.0": "ghcr.io/toa-io/runtime", "node:20": "node", "localhost:5000/bases/node:test": "localhost:5000/bases/node",
		"localhost:5000/bases/node": "localhost:5000/bases/node", "node@sha256:ab": "node", "r.io:443/n:t@sha256:ab": "r.io:443/n",
	} {
		if got := (Base{Reference: ref}).Repository(); got != want {
			t.Errorf("%s: %s, want %s", ref, got, want)
		}
	}
}

// A dependencies image's document, which every image built on it carries, lists every package
// and the components, and says nothing a code change alters: two images whose components'
// code differs (their versions are hashes of it) get the same bytes, which validate.
func TestDependenciesDocumentIsWholeAndTheSameWhateverTheCode(t *testing.T) {
	for _, f := range []Format{SPDX, CycloneDX} {
		var docs [][]byte
		for _, version := range []string{"0f1e2d3c", "9a8b7c6d"} {
			img := testImage(t)
			img.Dependencies = true
			img.Components[1].Version = version
			doc, err := img.SBOM(f, testBuilder, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, doc)
		}
		if !bytes.Equal(docs[0], docs[1]) {
			t.Errorf("%s: the dependencies' document changes with the code:\n%s\n%s", f, docs[0], docs[1])
		}
		s := string(docs[0])
		for _, want := range []string{`"name":"ms"`, `"shop.prices"`, strings.Repeat("cd", 32), "every image of registry.example:5000/shop/composition-front built on it"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s: the dependencies' document lacks %s:\n%s", f, want, s)
			}
		}
		for _, unwanted := range []string{"0f1e2d3c", "externalDocumentRefs", "urn:cdx:"} {
			if strings.Contains(s, unwanted) {
				t.Errorf("%s: the dependencies' document holds %s:\n%s", f, unwanted, s)
			}
		}
		if f == SPDX {
			validateSPDX(t, docs[0])
		} else if err := ValidateCycloneDX(t, docs[0]); err != nil {
			t.Errorf("the BOM does not validate against CycloneDX 1.6's schema: %v", err)
		}
	}
}
