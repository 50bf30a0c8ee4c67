package attest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
	"github.com/toa-deploy/toa-deploy/layer"
)

// Options say what Attacher attaches.
type Options struct {
	// Format is the SBOM's format; None attaches no SBOM and no provenance.
	Format Format
	// Signer signs the images and what is attached to them; nil signs nothing.
	Signer *sign.Signer
	// Builder names toa-push and its version; ToaPush() when empty.
	Builder Builder
	// Context, Environment and Runtime are the application's, for provenance.
	Context, Environment, Runtime string
	// Node and Npm are the runner's versions, which installed the dependencies.
	Node, Npm string
	// Created is the time the documents say they were made at: the push's SOURCE_DATE_EPOCH
	// (layer.SourceDateEpoch), which the caller reads; the Unix epoch when zero, for
	// reproducible bytes.
	Created time.Time
	// CacheDir, when set, keeps what npm packages each layer holds (fsys.SBOMLayers), so that
	// the SBOM of an image over a dependencies image read back from the registry reads none
	// of its layers.
	CacheDir string
}

// Attacher attaches to every image Push builds, through the destination it writes to: an SBOM
// per platform image and provenance for the image, as referrers, and cosign signatures of the
// image, of each platform's image and of each document.
func Attacher(o Options) image.Attacher {
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}
	if o.Builder.Name == "" {
		o.Builder = ToaPush()
	}
	memo := &layerMemo{reads: map[v1.Hash]*layerRead{}} // shared by the images of the push
	return func(ctx context.Context, dest image.Destination, b *image.Built) ([]image.Attachment, image.Sent, error) {
		a := &attaching{o: o, dest: dest, built: b, memo: memo}
		err := a.run(ctx)
		return a.attached, a.sent, err
	}
}

type attaching struct {
	o        Options
	dest     image.Destination
	built    *image.Built
	attached []image.Attachment
	sent     image.Sent
	memo     *layerMemo
}

// layerMemo is what the images of one push found in each layer: a layer they share (the base's,
// a dependencies image's) is read once, by whichever image asks first, the others waiting for it.
type layerMemo struct {
	mu    sync.Mutex
	reads map[v1.Hash]*layerRead
}

// layerRead is one layer's read, done or under way.
type layerRead struct {
	done chan struct{} // closed once read and err are set
	read *layerPackages
	err  error
}

func (a *attaching) run(ctx context.Context) error {
	img := a.built.Image
	idx, err := a.built.Index.IndexManifest()
	if err != nil {
		return err
	}
	if len(idx.Manifests) != len(a.built.Platforms) {
		return fmt.Errorf("the index of %s has %d images for %d platforms", img.Name, len(idx.Manifests), len(a.built.Platforms))
	}
	indexDesc, err := describe(a.built.Index)
	if err != nil {
		return err
	}
	signed := []string{indexDesc.Digest.String()}
	if a.o.Format == None {
		for _, desc := range idx.Manifests {
			signed = append(signed, desc.Digest.String())
		}
		return a.signAll(ctx, signed)
	}
	build, err := a.build(ctx, indexDesc.Digest.String(), idx)
	if err != nil {
		return err
	}
	// each platform's SBOM is referred to by its image and by the index: a reader given the
	// image's tag or the index's digest (Trivy's --sbom-sources oci) looks at the
	// index's referrers, one given a platform's digest at that image's
	mt, file := a.o.Format.MediaType(), a.o.Format.File()
	subjects := make([]subjectReferrers, 0, len(idx.Manifests)+1)
	onIndex := subjectReferrers{subject: indexDesc}
	for i, p := range a.built.Platforms {
		desc := idx.Manifests[i]
		doc, err := a.sbom(ctx, p, desc.Digest.String())
		if err != nil {
			return fmt.Errorf("the SBOM for %s: %w", p.Platform, err)
		}
		subjects = append(subjects, subjectReferrers{subject: desc, docs: []document{{kind: "sbom", platform: p.Platform, doc: doc,
			mediaType: mt, title: file}}})
		onIndex.docs = append(onIndex.docs, document{kind: "sbom", platform: p.Platform, doc: doc, mediaType: mt, title: file,
			annotations: map[string]string{AnnotationDescribes: desc.Digest.String()}})
	}
	prov, err := build.Provenance(a.o.Builder)
	if err != nil {
		return err
	}
	// it names the index's digest: no registry holds it yet, and it is sent without asking (the
	// question was the one round trip the attachments added to a code change's push)
	onIndex.docs = append(onIndex.docs, document{kind: "provenance", doc: prov, mediaType: MediaTypeInToto, title: ProvenanceFile,
		annotations: map[string]string{AnnotationPredicateType: PredicateSLSAProvenance}, fresh: true})
	subjects = append(subjects, onIndex)
	if err := a.referAll(ctx, subjects); err != nil {
		return err
	}
	for _, at := range a.attached {
		if at.Subject == indexDesc.Digest.String() {
			signed = append(signed, at.Digest)
		} else {
			signed = append(signed, at.Subject, at.Digest)
		}
	}
	return a.signAll(ctx, signed)
}

// AnnotationDescribes names, on a referrer of an index, the platform's image its document
// describes, as BuildKit names the image an attestation manifest is for.
const AnnotationDescribes = "vnd.docker.reference.digest"

// document is one document to attach.
type document struct {
	kind, platform   string // as image.Attachment says them
	doc              []byte
	mediaType, title string
	annotations      map[string]string
	fresh            bool // it names what this push made: no registry holds it yet (registry.Fresh)
}

// subjectReferrers are the documents attached to one manifest.
type subjectReferrers struct {
	subject v1.Descriptor
	docs    []document
}

// referAll writes the documents as referrers of their subjects: each subject's at once (one
// update of its referrers tag where the registry has no referrers API), the subjects side by
// side. What is attached is listed in the order of subjects and documents.
func (a *attaching) referAll(ctx context.Context, subjects []subjectReferrers) error {
	attached := make([][]image.Attachment, len(subjects))
	sent := make([]image.Sent, len(subjects))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i, s := range subjects {
		g.Go(func() error {
			var err error
			attached[i], sent[i], err = a.refer(gctx, s)
			return err
		})
	}
	err := g.Wait()
	for i := range subjects {
		a.attached = append(a.attached, attached[i]...)
		a.add(sent[i])
	}
	return err
}

// refer writes one subject's documents as its referrers.
func (a *attaching) refer(ctx context.Context, s subjectReferrers) ([]image.Attachment, image.Sent, error) {
	repo := a.built.Image.Repository
	var arts []v1.Image
	var out []image.Attachment
	for _, d := range s.docs {
		ann := a.created()
		for k, v := range d.annotations {
			ann[k] = v
		}
		art, err := artifactOf(d.doc, d.mediaType, d.mediaType, d.title, s.subject, ann, d.fresh)
		if err != nil {
			return nil, image.Sent{}, err
		}
		digest, err := art.Digest()
		if err != nil {
			return nil, image.Sent{}, err
		}
		arts = append(arts, art)
		out = append(out, image.Attachment{Kind: d.kind, Platform: d.platform, Subject: s.subject.Digest.String(), Digest: digest.String(),
			MediaType: d.mediaType})
	}
	sent, err := a.dest.WriteReferrers(ctx, repo, arts)
	if err != nil {
		return nil, sent, fmt.Errorf("attach to %s@%s: %w", repo, s.subject.Digest, err)
	}
	return out, sent, nil
}

// signAll signs each digest, when there is a signer.
func (a *attaching) signAll(ctx context.Context, digests []string) error {
	if a.o.Signer == nil {
		return nil
	}
	for _, digest := range digests {
		if err := a.sign(ctx, digest); err != nil {
			return err
		}
	}
	return nil
}

// created are the annotations every attached manifest starts from: OCI's creation time when
// SOURCE_DATE_EPOCH (Options.Created) gives one. The Unix epoch, which stands for no time,
// is left out: it says nothing, and a code change sent it in each manifest and again in each
// referrers tag index.
func (a *attaching) created() map[string]string {
	if a.o.Created.Equal(time.Unix(0, 0)) {
		return map[string]string{}
	}
	return map[string]string{AnnotationCreated: a.o.Created.UTC().Format(time.RFC3339)}
}

// sign adds the signer's signature of digest to the image under its signature tag, unless it is
// there already.
func (a *attaching) sign(ctx context.Context, digest string) error {
	attached, sent, err := image.Sign(ctx, a.dest, a.o.Signer, a.built.Image.Repository, digest)
	a.add(sent)
	if err != nil {
		return err
	}
	a.attached = append(a.attached, attached)
	return nil
}

func (a *attaching) add(s image.Sent) {
	a.sent.Bytes += s.Bytes
	a.sent.Requests += s.Requests
}

// sbom is the SBOM of one platform's image, every package in it. An image built on a
// dependencies image carries that image's document, which lists them all (the image adds only
// its components' sources, whose packages the document names): the same bytes for every image
// built on it, so that a code change sends a manifest of a few hundred bytes that refers to a
// blob the registry holds already, not the document again.
func (a *attaching) sbom(ctx context.Context, p image.BuiltPlatform, digest string) ([]byte, error) {
	if p.Dependencies == nil {
		img, err := a.described(ctx, p.Image, a.built.Image.Tag, digest, p)
		if err != nil {
			return nil, err
		}
		return img.SBOM(a.o.Format, a.o.Builder, a.o.Created)
	}
	deps, err := p.Dependencies.Digest()
	if err != nil {
		return nil, err
	}
	img, err := a.described(ctx, p.Dependencies, a.built.Image.DepsTag, deps.String(), p)
	if err != nil {
		return nil, err
	}
	img.Dependencies = true
	return img.SBOM(a.o.Format, a.o.Builder, a.o.Created)
}

// components are the image's components; a service's image has the extension's package.
func components(img *image.Image) []*toa.Component {
	if img.Service == nil {
		return img.Components
	}
	c := &toa.Component{Path: img.Service.Dir, Locator: toa.Locator{ID: img.Service.Reference, Label: path.Base(image.ServiceFolder)},
		Version: img.Service.Version, Lockfile: lockfile.Find(img.Service.Dir)}
	if p := filepath.Join(img.Service.Dir, "package.json"); fileExists(p) {
		c.PackageJSON = p
	}
	return []*toa.Component{c}
}

// historyPrefix opens the history entry of every layer toa-push lays over a base
// (image.addendum).
const historyPrefix = "toa-push: "

// toaLayers are the layers toa-push laid over the base, with their history entries. They are
// the image's last layers, and theirs are the last history entries that describe a layer; a
// base's own history may miss entries, so the two are matched from the end.
func toaLayers(img v1.Image) ([]v1.Layer, []string, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, nil, err
	}
	var what []string // toa-push's entries, last first
	for i := len(cfg.History) - 1; i >= 0; i-- {
		h := cfg.History[i]
		if h.EmptyLayer {
			continue
		}
		w, ok := strings.CutPrefix(h.CreatedBy, historyPrefix)
		if !ok {
			break
		}
		what = append(what, w)
	}
	if len(what) > len(layers) {
		return nil, nil, fmt.Errorf("the image's history names %d layers of toa-push, it has %d layers", len(what), len(layers))
	}
	slices.Reverse(what)
	return layers[len(layers)-len(what):], what, nil
}

// described is what an SBOM says of one platform's image of the repository (built on the
// platform's base): its components, what npm installed for them in its layers, and the npm
// packages its base holds.
func (a *attaching) described(ctx context.Context, of v1.Image, tag, digest string, p image.BuiltPlatform) (*Image, error) {
	img := &Image{Repository: a.built.Image.Repository, Tag: tag, Digest: digest, Platform: p.Platform,
		Base: Base{Reference: a.built.BaseReference(), Digest: p.BaseDigest}}
	installs, base, err := a.installsOf(ctx, of)
	if err != nil {
		return nil, err
	}
	img.Base.Installed = base
	byLabel := map[string]*Install{}
	for _, in := range installs {
		if in.Root == "usr/local/lib" {
			img.Global = in
			continue
		}
		byLabel[strings.TrimPrefix(in.Root, layer.Root+"/")] = in
	}
	for _, c := range components(a.built.Image) {
		comp := Component{ID: c.Locator.ID, Label: c.Locator.Label, Version: c.Version, Installed: byLabel[c.Locator.Label]}
		if err := readPackage(c, &comp); err != nil {
			return nil, err
		}
		img.Components = append(img.Components, comp)
	}
	return img, nil
}

// installsOf reads what npm installed from every layer toa-push made of an image, and the npm
// packages in the base's layers below them. Each layer is read once a run (the platforms'
// images share the sources), and once a machine where there is a cache: what a layer holds is
// kept under its digest, so that a code change reads no layer of the dependencies image again.
func (a *attaching) installsOf(ctx context.Context, img v1.Image) (installs, base []*Install, err error) {
	own, what, err := toaLayers(img)
	if err != nil {
		return nil, nil, err
	}
	all, err := img.Layers()
	if err != nil {
		return nil, nil, err
	}
	var below []*layerPackages
	for _, l := range all[:len(all)-len(own)] {
		read, err := a.layerPackages(ctx, l, true)
		if err != nil {
			return nil, nil, fmt.Errorf("read the npm packages of a layer of the base: %w", err)
		}
		below = append(below, read)
	}
	for i, l := range own {
		if image.IsDependencyPart(what[i]) || strings.HasPrefix(what[i], "sources") {
			continue // a part's packages are in the hidden lockfile of the component's first layer
		}
		read, err := a.layerPackages(ctx, l, false)
		if err != nil {
			return nil, nil, fmt.Errorf("read what npm installed from the layer %q: %w", what[i], err)
		}
		if read.Installed != nil {
			installs = append(installs, read.Installed)
		}
	}
	return installs, baseInstalls(below), nil
}

// layerPackages reads the npm packages of one layer: a base's to its end (readLayerPackages),
// toa-push's up to its hidden lockfile (InstalledIn), kept under the layer's digest for the
// push (layerMemo) and in the cache. A cache entry is written only once the whole layer was
// read, and so checked against its digest.
func (a *attaching) layerPackages(ctx context.Context, l v1.Layer, base bool) (*layerPackages, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := l.Digest()
	if err != nil {
		return nil, err
	}
	a.memo.mu.Lock()
	r, found := a.memo.reads[d]
	if !found {
		r = &layerRead{done: make(chan struct{})}
		a.memo.reads[d] = r
	}
	a.memo.mu.Unlock()
	if found {
		select {
		case <-r.done:
			return r.read, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.read, r.err = a.readLayer(ctx, l, d, base)
	if r.err != nil { // the next image that asks reads it again
		a.memo.mu.Lock()
		delete(a.memo.reads, d)
		a.memo.mu.Unlock()
	}
	close(r.done)
	return r.read, r.err
}

// readLayer reads one layer's npm packages from the cache, else from the layer.
func (a *attaching) readLayer(ctx context.Context, l v1.Layer, d v1.Hash, base bool) (*layerPackages, error) {
	var read *layerPackages
	file := ""
	if a.o.CacheDir != "" {
		file = fsys.SBOMLayers.Path(a.o.CacheDir, d.Algorithm+"-"+d.Hex+".json")
		if data, ok := fsys.SBOMLayers.Read(file); ok && json.Unmarshal(data, &read) == nil && read != nil {
			return read, nil
		}
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if base {
		read, err = readLayerPackages(rc)
	} else {
		read = &layerPackages{}
		read.Installed, err = readInstall(rc)
	}
	if err != nil {
		return nil, err
	}
	if file == "" {
		return read, nil
	}
	if err := registry.ReadWhole(rc); err != nil {
		return nil, err
	}
	if data, err := json.Marshal(read); err == nil {
		_ = fsys.WriteFile(file, data, 0o644) // a cache: losing it costs a read of the layer
	}
	return read, ctx.Err()
}

// readPackage fills in what the component's package.json says (its name, version, and the
// installed packages it names), and what its lockfile adds to what npm recorded in node_modules
// (resolved URLs and integrity, where the hidden lockfile lacks them).
func readPackage(c *toa.Component, comp *Component) error {
	data := c.Declared() // the package.json the image carries for a component without one
	if c.PackageJSON != "" {
		var err error
		if data, err = os.ReadFile(c.PackageJSON); err != nil {
			return fmt.Errorf("read %s: %w", c.PackageJSON, err)
		}
	}
	var pkg struct {
		Name         string            `json:"name"`
		Version      string            `json:"version"`
		Dependencies map[string]string `json:"dependencies"`
		Optional     map[string]string `json:"optionalDependencies"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		return fmt.Errorf("read %s: %w", c.PackageJSON, err)
	}
	comp.Package, comp.PackageVersion = pkg.Name, pkg.Version
	if comp.Installed == nil {
		return nil
	}
	var names []string
	for n := range pkg.Dependencies {
		names = append(names, n)
	}
	for n := range pkg.Optional {
		names = append(names, n)
	}
	comp.Direct = comp.Installed.Direct(names)
	if c.Lockfile == "" { // npm-shrinkwrap.json over package-lock.json, as npm reads them
		return nil
	}
	locked, err := lockfile.Read(c.Lockfile)
	if errors.Is(err, lockfile.ErrFormat) {
		return nil // npm ci read it; what it installed is what counts
	}
	if err != nil {
		return err
	}
	comp.Installed = fillFrom(comp.Installed, fromLockfile(locked))
	return nil
}

// fillFrom adds the lockfile's resolved URL and integrity to the packages npm installed that
// lack them, where the lockfile has the same package at the same path and version.
func fillFrom(in *Install, locked []Package) *Install {
	at := map[string]Package{}
	for _, p := range locked {
		at[p.Path] = p
	}
	out := &Install{Root: in.Root, Packages: make([]Package, len(in.Packages))}
	for i, p := range in.Packages {
		if l, ok := at[p.Path]; ok && l.Version == p.Version {
			if p.Resolved == "" {
				p.Resolved = l.Resolved
			}
			if p.Integrity == "" {
				p.Integrity = l.Integrity
			}
		}
		out.Packages[i] = p
	}
	return out
}

// build is what provenance says of the image.
func (a *attaching) build(ctx context.Context, indexDigest string, idx *v1.IndexManifest) (*Build, error) {
	img := a.built.Image
	b := &Build{Name: img.Name, Repository: img.Repository, Tag: img.Tag, Digest: indexDigest,
		Context: a.o.Context, Environment: a.o.Environment, Runtime: a.o.Runtime, Node: a.o.Node, Npm: a.o.Npm}
	for i, p := range a.built.Platforms {
		pb := PlatformBuild{Platform: p.Platform, Digest: idx.Manifests[i].Digest.String(),
			Base: Base{Reference: a.built.BaseReference(), Digest: p.BaseDigest}}
		layers, what, err := toaLayers(p.Image)
		if err != nil {
			return nil, err
		}
		if p.Dependencies != nil {
			// the dependencies image by its digest: it pins its own layers, however many
			d, err := p.Dependencies.Digest()
			if err != nil {
				return nil, err
			}
			own, _, err := toaLayers(p.Dependencies)
			if err != nil {
				return nil, err
			}
			if len(own) <= len(layers) {
				pb.Dependencies = d.String()
				layers, what = layers[len(own):], what[len(own):]
			}
		}
		for j, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return nil, err
			}
			pb.Layers = append(pb.Layers, Layer{What: what[j], Digest: d.String()})
		}
		b.Platforms = append(b.Platforms, pb)
	}
	for _, c := range components(img) {
		bc := BuildComponent{ID: c.Locator.ID, Version: c.Version, Files: map[string]string{}}
		for _, f := range []string{c.PackageJSON, c.Lockfile} {
			if f == "" {
				continue
			}
			d, err := fileDigest(f)
			if err != nil {
				return nil, err
			}
			bc.Files[filepath.Base(f)] = d
		}
		b.Components = append(b.Components, bc)
	}
	sort.SliceStable(b.Components, func(i, j int) bool { return b.Components[i].ID < b.Components[j].ID })
	return b, nil
}

func fileDigest(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func describe(idx v1.ImageIndex) (v1.Descriptor, error) {
	mt, err := idx.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := idx.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}
