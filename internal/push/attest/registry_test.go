package attest_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/attest"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/push/layout"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
	"github.com/toa-deploy/toa-deploy/layer"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// copyApp copies testdata/app into a new folder, its images going to the registry at addr, its
// base read from the registry at baseAddr.
func copyApp(t *testing.T, addr, baseAddr string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "app")
	err := filepath.Walk("testdata/app", func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("testdata/app", path)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		data = bytes.ReplaceAll(data, []byte("localhost:5000/bases"), []byte(baseAddr+"/bases"))
		return os.WriteFile(filepath.Join(dst, rel), bytes.ReplaceAll(data, []byte("localhost:5000"), []byte(addr)), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// layerCache is one layer cache for the tests of this package: npm installs each platform once.
var layerCache = struct {
	sync.Once
	dir string
}{}

func cacheDir(t *testing.T) string {
	layerCache.Do(func() {
		dir, err := os.MkdirTemp("", "toa-attest-cache-")
		if err != nil {
			t.Fatal(err)
		}
		layerCache.dir = dir
	})
	return layerCache.dir
}

func TestMain(m *testing.M) {
	// The push checks the sandbox's namespaces for the arm64 install scripts: this program is
	// their init, as toa-push is.
	sandbox.Init()
	code := m.Run()
	if layerCache.dir != "" {
		os.RemoveAll(layerCache.dir)
	}
	os.Exit(code)
}

// pushed is an application pushed with attachments.
type pushed struct {
	app    *toa.Application
	result *image.Result
	addr   string
}

// pushApp builds the test application's images for the registry at addr, on the test base in
// the same registry, into dest (that registry when nil) with the attacher.
func pushApp(t *testing.T, addr string, dest image.Destination, attach image.Attacher, edits ...func(dir string)) *pushed {
	return pushAppFrom(t, addr, addr, dest, attach, edits...)
}

func pushAppFrom(t *testing.T, addr, baseAddr string, dest image.Destination, attach image.Attacher, edits ...func(dir string)) *pushed {
	t.Helper()
	ctx := t.Context()
	dir := copyApp(t, addr, baseAddr)
	for _, edit := range edits {
		edit(dir)
	}
	app, err := toa.Load(dir, "default")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.NewRegistries()
	if err != nil {
		t.Fatal(err)
	}
	tools, err := layer.DetectToolchain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := image.Bases(app, image.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bases := map[string]*image.Base{}
	for _, r := range refs {
		bases[r] = image.ResolveBase(ctx, reg, r)
	}
	plan, err := image.NewPlan(app, image.PlanOptions{Toolchain: tools, Bases: bases})
	if err != nil {
		t.Fatal(err)
	}
	cache := cacheDir(t)
	result, err := image.Push(ctx, app, plan, image.PushOptions{
		Registries: reg, Destination: dest, CacheDir: cache, Attach: attach,
		Layers: image.NewLayers(app, tools, layer.WithCacheDir(cache)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &pushed{app: app, result: result, addr: addr}
}

// signingKey writes a new ECDSA P-256 key pair into a folder: the private key as toa-push reads
// it, the public key as cosign's --key does.
func signingKey(t *testing.T) (signer *sign.Signer, pubFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(k)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	signer, err = sign.ParseKey(keyPEM, "test key", nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := signer.PublicKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	pubFile = filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(pubFile, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	return signer, pubFile
}

func attacher(format attest.Format, signer *sign.Signer) image.Attacher {
	return attest.Attacher(attest.Options{Format: format, Signer: signer, Builder: attest.ToaPush(),
		Context: "sbom", Environment: "default", Runtime: "1.0.0-alpha.289", Created: time.Unix(0, 0).UTC()})
}

// run runs a tool and returns its standard output, failing the test with both outputs when it
// fails.
func run(t *testing.T, tool string, args ...string) string {
	t.Helper()
	out, err := runMay(t, tool, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(tool), strings.Join(args, " "), err, out)
	}
	return out
}

func runMay(t *testing.T, tool string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), tool, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir(), "TUF_ROOT="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// discovered are the referrers `oras discover --format json` lists (oras v1.3).
type discovered struct {
	Referrers []struct {
		ArtifactType string `json:"artifactType"`
		Digest       string `json:"digest"`
	} `json:"referrers"`
}

func discover(t *testing.T, oras string, args ...string) discovered {
	t.Helper()
	out := run(t, oras, append([]string{"discover", "--format", "json", "--depth", "1"}, args...)...)
	var d discovered
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("oras discover: %v\n%s", err, out)
	}
	return d
}

// byKind is what was attached, by kind, then by subject.
func byKind(p *image.Pushed) map[string]map[string]image.Attachment {
	out := map[string]map[string]image.Attachment{}
	for _, a := range p.Attachments {
		if out[a.Kind] == nil {
			out[a.Kind] = map[string]image.Attachment{}
		}
		out[a.Kind][a.Subject] = a
	}
	return out
}

// sbomsOn are the SBOMs attached to the subject, by platform.
func sbomsOn(p *image.Pushed, subject string) map[string]image.Attachment {
	out := map[string]image.Attachment{}
	for _, a := range p.Attachments {
		if a.Kind == "sbom" && a.Subject == subject {
			out[a.Platform] = a
		}
	}
	return out
}

// count is how many attachments of the kind p has.
func count(p *image.Pushed, kind string) int {
	n := 0
	for _, a := range p.Attachments {
		if a.Kind == kind {
			n++
		}
	}
	return n
}

// referrerTypes are the artifact types of the referrers oras discovered, with their digests.
func referrerTypes(d discovered) map[string]string {
	out := map[string]string{}
	for _, r := range d.Referrers {
		out[r.Digest] = r.ArtifactType
	}
	return out
}

// lockfileVersions are the versions the component's lockfile pins.
func lockfileVersions(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("testdata/app/components/sbom.orders/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for p, e := range lock.Packages {
		out[strings.TrimPrefix(p, "node_modules/")] = e.Version
	}
	return out
}

// spdxPackages validates an SPDX document against SPDX 2.3's schema and returns its packages'
// versions by name.
func spdxPackages(t *testing.T, doc []byte) map[string]string {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := jsonschema.NewCompiler().Compile("testdata/schema/spdx-2.3.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(v); err != nil {
		t.Fatalf("the SBOM does not validate against SPDX 2.3's schema: %v", err)
	}
	var d struct {
		Packages []struct {
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range d.Packages {
		out[p.Name] = p.VersionInfo
	}
	return out
}

// pullDocument fetches an attached document with oras (not our library), by the referrer's digest.
func pullDocument(t *testing.T, oras, ref, file string, extra ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	run(t, oras, append([]string{"pull", "-o", dir, ref}, extra...)...)
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("oras pull %s wrote no %s: %v", ref, file, err)
	}
	return data
}

func TestAttachedToARegistry(t *testing.T) {
	oras, cosign := harness.Tool(t, "oras"), harness.Tool(t, "cosign")
	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	signer, pub := signingKey(t)
	p := pushApp(t, addr, nil, attacher(attest.SPDX, signer))
	if len(p.result.Images) != 1 {
		t.Fatalf("images %+v", p.result.Images)
	}
	img := p.result.Images[0]
	attached := byKind(img)
	ref := img.Repository + ":" + img.Tag
	idx, err := remote.Index(mustRef(t, ref), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	// an SBOM per platform, on its image and on the index; the provenance; signatures of the
	// index, the two images and the five referrers
	if len(im.Manifests) != 2 || count(img, "sbom") != 4 || count(img, "dependencies sbom") != 0 || count(img, "provenance") != 1 ||
		count(img, "signature") != 8 {
		t.Fatalf("attached %+v: want an SBOM per platform on its image and on the index, provenance, eight signatures", img.Attachments)
	}
	locked := lockfileVersions(t)
	onIndex := sbomsOn(img, img.Digest)

	t.Run("oras discover lists the referrers", func(t *testing.T) {
		d := referrerTypes(discover(t, oras, "--plain-http", ref))
		want := map[string]string{attached["provenance"][img.Digest].Digest: attest.MediaTypeInToto}
		for _, a := range onIndex {
			want[a.Digest] = attest.MediaTypeSPDX
		}
		if !maps.Equal(d, want) {
			t.Errorf("the index's referrers %v, want the provenance and an SBOM per platform %v", d, want)
		}
		for _, m := range im.Manifests {
			d := discover(t, oras, "--plain-http", img.Repository+"@"+m.Digest.String())
			if len(d.Referrers) != 1 || d.Referrers[0].ArtifactType != attest.MediaTypeSPDX || d.Referrers[0].Digest != attached["sbom"][m.Digest.String()].Digest {
				t.Errorf("the referrers of %s: %+v, want its SBOM", image.Platform(m.Platform), d.Referrers)
			}
		}
		// Distribution 2.8 has no referrers API: the referrers tag schema carries them
		if _, err := remote.Index(mustRef(t, img.Repository+":"+strings.Replace(img.Digest, ":", "-", 1)), remote.WithContext(t.Context())); err != nil {
			t.Errorf("no referrers tag: %v", err)
		}
	})

	t.Run("the SPDX documents validate and list what npm installed, alone", func(t *testing.T) {
		for _, m := range im.Manifests {
			platform := image.Platform(m.Platform)
			sbom := attached["sbom"][m.Digest.String()]
			doc := pullDocument(t, oras, img.Repository+"@"+sbom.Digest, "sbom.spdx.json", "--plain-http")
			if bytes.Contains(doc, []byte("externalDocumentRefs")) {
				t.Errorf("%s: the SBOM refers to another document", platform)
			}
			pkgs := spdxPackages(t, doc)
			esbuild := "@esbuild/linux-" + map[string]string{"linux/amd64": "x64", "linux/arm64": "arm64"}[platform]
			// every package the lockfile pins for production on this platform, at its version
			for name, version := range locked {
				if name == "" || name == "is-number" || strings.HasPrefix(name, "@esbuild/") && name != esbuild {
					continue // the component itself; a dev dependency; another platform's binary
				}
				if pkgs[name] != version {
					t.Errorf("%s: %s is at %q, the lockfile pins %q", platform, name, pkgs[name], version)
				}
			}
			for name := range pkgs {
				if name == "is-number" || (strings.HasPrefix(name, "@esbuild/") && name != esbuild) {
					t.Errorf("%s: lists %s, which npm did not install for it", platform, name)
				}
			}
			if _, ok := pkgs["sbom.orders"]; !ok {
				t.Errorf("%s: the components are missing: %v", platform, pkgs)
			}
			if _, ok := pkgs["sbom.notes"]; !ok {
				t.Errorf("%s: the components are missing: %v", platform, pkgs)
			}
			// the base's npm packages too: the test base carries a stand-in runtime
			if pkgs["@toa.io/runtime"] == "" {
				t.Errorf("%s: the base's runtime is missing: %v", platform, pkgs)
			}
			// the index refers to the same document for the platform
			if a, ok := onIndex[platform]; !ok || !bytes.Equal(pullDocument(t, oras, img.Repository+"@"+a.Digest, "sbom.spdx.json", "--plain-http"), doc) {
				t.Errorf("%s: the index's SBOM for the platform is not its image's (%+v)", platform, a)
			}
		}
	})

	t.Run("the provenance names the builder and the inputs", func(t *testing.T) {
		version := ""
		for _, c := range p.app.Components {
			if c.Locator.ID == "sbom.orders" {
				version = c.Version
			}
		}
		prov := attached["provenance"][img.Digest]
		doc := pullDocument(t, oras, img.Repository+"@"+prov.Digest, attest.ProvenanceFile, "--plain-http")
		s := string(doc)
		for _, want := range []string{`"predicateType":"https://slsa.dev/provenance/v1"`, `"id":"` + attest.BuilderID + `"`,
			`"context":"sbom"`, `"name":"component sbom.orders ` + version + `: package-lock.json"`, strings.TrimPrefix(im.Manifests[0].Digest.String(), "sha256:")} {
			if !strings.Contains(s, want) {
				t.Errorf("the provenance lacks %s:\n%s", want, s)
			}
		}
	})

	t.Run("cosign verify passes on the image and what is attached", func(t *testing.T) {
		verify := []string{"verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", "--output", "json"}
		run(t, cosign, append(verify, ref)...)
		for _, m := range im.Manifests {
			run(t, cosign, append(verify, img.Repository+"@"+m.Digest.String())...)
		}
		for _, a := range img.Attachments {
			if a.Kind != "signature" {
				run(t, cosign, append(verify, img.Repository+"@"+a.Digest)...)
			}
		}
	})

	t.Run("cosign verify fails on a tampered image", func(t *testing.T) {
		verify := []string{"verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry"}
		// another index under the image's tag
		tampered := mutate.Annotations(idx, map[string]string{"tampered": "yes"}).(v1.ImageIndex)
		if err := remote.WriteIndex(mustRef(t, ref), tampered, remote.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
		if out, err := runMay(t, cosign, append(verify, ref)...); err == nil {
			t.Errorf("cosign verified a tampered image:\n%s", out)
		}
		// and the image's signatures copied to it: they sign another digest
		d, _ := tampered.Digest()
		sigs, err := remote.Image(mustRef(t, img.Repository+":"+strings.Replace(img.Digest, ":", "-", 1)+".sig"), remote.WithContext(t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(mustRef(t, img.Repository+":"+strings.Replace(d.String(), ":", "-", 1)+".sig"), sigs, remote.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
		if out, err := runMay(t, cosign, append(verify, ref)...); err == nil {
			t.Errorf("cosign verified a tampered image with the signatures of another:\n%s", out)
		}
		// with another key, the untouched image does not verify either
		_, otherPub := signingKey(t)
		if out, err := runMay(t, cosign, "verify", "--key", otherPub, "--insecure-ignore-tlog=true", "--allow-http-registry", img.Repository+"@"+img.Digest); err == nil {
			t.Errorf("cosign verified with another key:\n%s", out)
		}
	})
}

// A push that changes nothing adds nothing: no manifest, no referrer, no signature. A change of
// code builds the image over the dependencies image the registry has, and its SBOM still lists
// what npm installed, read from the registry's layers.
func TestNoChangeAddsNothingAChangeAttachesAgain(t *testing.T) {
	addr, log := harness.RegistryWithLog(t)
	harness.PushTestBase(t, addr)
	signer, _ := signingKey(t)
	first := pushApp(t, addr, nil, attacher(attest.SPDX, signer))
	if len(first.result.Images[0].Attachments) == 0 {
		t.Fatal("nothing attached")
	}
	log.Reset()
	again := pushApp(t, addr, nil, attacher(attest.SPDX, signer))
	for _, r := range log.Requests() {
		if r.Method != "HEAD" && r.Method != "GET" {
			t.Errorf("a push with no change sent %s %s", r.Method, r.Path)
		}
	}
	if a := again.result.Images[0].Attachments; len(a) != 0 || again.result.Images[0].Built {
		t.Errorf("a push with no change attached %+v", a)
	}

	log.Reset()
	changed := pushApp(t, addr, nil, attacher(attest.SPDX, signer), func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "components", "sbom.orders", "place.js"), []byte("module.exports = () => 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	img := changed.result.Images[0]
	if !img.Built || img.DepsBuilt {
		t.Fatalf("built %v, dependencies built %v: want the sources over the registry's dependencies image", img.Built, img.DepsBuilt)
	}
	locked := lockfileVersions(t)
	// the documents the first push attached, by platform: the change refers to the same blobs
	firstDocs := map[string]v1.Hash{}
	for _, a := range first.result.Images[0].Attachments {
		if a.Kind == "sbom" {
			firstDocs[a.Platform] = documentBlob(t, img.Repository+"@"+a.Digest)
		}
	}
	for _, a := range img.Attachments {
		if a.Kind != "sbom" {
			continue
		}
		sbom, err := remote.Image(mustRef(t, img.Repository+"@"+a.Digest), remote.WithContext(t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		doc, _, err := attest.Document(sbom)
		if err != nil {
			t.Fatal(err)
		}
		if pkgs := spdxPackages(t, doc); pkgs["ms"] != locked["ms"] || pkgs["debug"] != locked["debug"] {
			t.Errorf("%s: the SBOM over the registry's dependencies lists ms %q, debug %q", a.Platform, pkgs["ms"], pkgs["debug"])
		}
		blob := documentBlob(t, img.Repository+"@"+a.Digest)
		if blob != firstDocs[a.Platform] {
			t.Errorf("%s: a code change attached another document (%s) than the first push (%s)", a.Platform, blob, firstDocs[a.Platform])
		}
		for _, r := range log.Requests() {
			if r.IsBlobUpload() && strings.Contains(r.Query, blob.Hex) {
				t.Errorf("%s: a code change sent the SBOM's document again: %s %s?%s", a.Platform, r.Method, r.Path, r.Query)
			}
		}
	}
}

// documentBlob is the digest of the one document of an attached manifest.
func documentBlob(t *testing.T, ref string) v1.Hash {
	t.Helper()
	img, err := remote.Image(mustRef(t, ref), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil || len(m.Layers) != 1 {
		t.Fatalf("%s: %v, %d layers", ref, err, len(m.Layers))
	}
	return m.Layers[0].Digest
}

// Into an OCI layout, and across to a registry that has none of it with layout.Push (what
// --from-oci-layout runs): the referrers and signatures go along, before the tag.
func TestCarriedByAnOCILayout(t *testing.T) {
	oras, cosign := harness.Tool(t, "oras"), harness.Tool(t, "cosign")
	bases, target := harness.Registry(t), harness.Registry(t)
	harness.PushTestBase(t, bases)
	signer, pub := signingKey(t)
	dir := filepath.Join(t.TempDir(), "layout")
	l, err := layout.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := pushAppFrom(t, target, bases, l, attacher(attest.CycloneDX, signer))
	img := p.result.Images[0]
	attached := byKind(img)
	idx, err := l.Index(t.Context(), img.Repository+":"+img.Tag)
	if err != nil || idx == nil {
		t.Fatalf("the layout lacks the image: %v", err)
	}
	im, _ := idx.IndexManifest()
	// oras resolves in a layout what index.json lists: the image's index, and the referrers
	d := referrerTypes(discover(t, oras, "--oci-layout", dir+"@"+img.Digest))
	if d[attached["provenance"][img.Digest].Digest] != attest.MediaTypeInToto || len(d) != 1+len(im.Manifests) {
		t.Errorf("the layout's referrers of the index: %v, want its provenance and an SBOM per platform", d)
	}
	for _, m := range im.Manifests {
		sbom := attached["sbom"][m.Digest.String()]
		var manifest v1.Manifest
		if err := json.Unmarshal([]byte(run(t, oras, "manifest", "fetch", "--oci-layout", dir+"@"+sbom.Digest)), &manifest); err != nil {
			t.Fatal(err)
		}
		if manifest.ArtifactType != attest.MediaTypeCycloneDX || manifest.Subject == nil || manifest.Subject.Digest != m.Digest {
			t.Errorf("the layout's SBOM of %s: %+v", m.Digest, manifest)
		}
		doc := pullDocument(t, oras, dir+"@"+sbom.Digest, "sbom.cdx.json", "--oci-layout")
		if err := attest.ValidateCycloneDX(t, doc); err != nil {
			t.Errorf("the CycloneDX SBOM of %s does not validate against CycloneDX 1.6's schema: %v", m.Digest, err)
		}
		// every package in the BOM itself, none behind a BOM-Link
		if !bytes.Contains(doc, []byte(`"specVersion":"1.6"`)) || !bytes.Contains(doc, []byte(`"purl":"pkg:npm/ms@2.1.3"`)) ||
			bytes.Contains(doc, []byte("urn:cdx:")) {
			t.Errorf("the CycloneDX SBOM of %s lacks ms or refers to another BOM:\n%s", m.Digest, doc)
		}
	}
	if _, err := remote.Head(mustRef(t, img.Repository+":"+img.Tag), remote.WithContext(t.Context())); err == nil {
		t.Fatal("writing the layout pushed to the target registry")
	}

	// someone else signed the index on the target already: their signature stays beside ours
	other, otherPub := signingKey(t)
	theirs, err := other.Image(nil, img.Repository, img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(mustRef(t, img.Repository+":"+strings.Replace(img.Digest, ":", "-", 1)+".sig"), theirs, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}

	reg, err := registry.NewRegistries()
	if err != nil {
		t.Fatal(err)
	}
	read, err := layout.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	result, err := layout.Push(t.Context(), read, image.PushOptions{Registries: reg})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(result.Images[0].Attachments); n != len(img.Attachments) {
		t.Errorf("%d attachments pushed from the layout, %d written into it", n, len(img.Attachments))
	}
	ref := img.Repository + ":" + img.Tag
	d = referrerTypes(discover(t, oras, "--plain-http", ref))
	if d[attached["provenance"][img.Digest].Digest] != attest.MediaTypeInToto || len(d) != 1+len(im.Manifests) {
		t.Errorf("the target registry's referrers of the index: %v, want the provenance and an SBOM per platform", d)
	}
	run(t, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", ref)
	run(t, cosign, "verify", "--key", otherPub, "--insecure-ignore-tlog=true", "--allow-http-registry", ref)
	for _, m := range im.Manifests {
		run(t, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", img.Repository+"@"+attached["sbom"][m.Digest.String()].Digest)
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
