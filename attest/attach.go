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
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/layer"
	"github.com/toa-deploy/toa-deploy/toa"
)

// Options say what Attacher attaches.
type Options struct {
	// Format is the SBOM's format; None attaches no SBOM and no provenance.
	Format Format
	// Signer signs the images and what is attached to them; nil signs nothing.
	Signer *Signer
	// Builder names toa-push and its version; ToaPush() when empty.
	Builder Builder
	// Context, Environment and Runtime are the application's, for provenance.
	Context, Environment, Runtime string
	// Node and Npm are the runner's versions, which installed the dependencies.
	Node, Npm string
	// Created is the time the documents say they were made at; Epoch when zero, for
	// reproducible bytes.
	Created time.Time
}

// Attacher attaches to every image Push builds, through the destination it writes to: an SBOM
// per platform image and provenance for the image, as referrers, and cosign signatures of the
// image, of each platform's image and of each document.
func Attacher(o Options) image.Attacher {
	if o.Created.IsZero() {
		o.Created = Epoch()
	}
	if o.Builder.Name == "" {
		o.Builder = ToaPush()
	}
	return func(ctx context.Context, dest image.Destination, b *image.Built) ([]image.Attachment, image.Sent, error) {
		a := &attaching{o: o, dest: dest, built: b}
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
	read     map[v1.Hash]*Install // what InstalledIn found in a layer, by its digest
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
	if a.o.Format != None {
		build, err := a.build(ctx, indexDesc.Digest.String(), idx)
		if err != nil {
			return err
		}
		for i, p := range a.built.Platforms {
			desc := idx.Manifests[i]
			shared, err := a.sharedSBOM(ctx, p, &signed)
			if err != nil {
				return fmt.Errorf("the SBOM of the dependencies for %s: %w", p.Platform, err)
			}
			sbom, err := a.sbom(ctx, p, desc.Digest.String(), shared)
			if err != nil {
				return fmt.Errorf("the SBOM for %s: %w", p.Platform, err)
			}
			mt := a.o.Format.MediaType()
			d, err := a.refer(ctx, sbom, mt, a.o.Format.File(), desc, nil)
			if err != nil {
				return err
			}
			a.attached = append(a.attached, image.Attachment{Kind: "sbom", Platform: p.Platform, Subject: desc.Digest.String(), Digest: d, MediaType: mt})
			signed = append(signed, desc.Digest.String(), d)
		}
		doc, err := build.Provenance(a.o.Builder)
		if err != nil {
			return err
		}
		d, err := a.refer(ctx, doc, MediaTypeInToto, ProvenanceFile, indexDesc, map[string]string{AnnotationPredicateType: PredicateSLSAProvenance})
		if err != nil {
			return err
		}
		a.attached = append(a.attached, image.Attachment{Kind: "provenance", Subject: indexDesc.Digest.String(), Digest: d, MediaType: MediaTypeInToto})
		signed = append(signed, d)
	} else {
		for _, desc := range idx.Manifests {
			signed = append(signed, desc.Digest.String())
		}
	}
	if a.o.Signer == nil {
		return nil
	}
	for _, digest := range signed {
		if err := a.sign(ctx, digest); err != nil {
			return err
		}
	}
	return nil
}

// refer writes doc as a referrer of subject, and returns its manifest's digest.
func (a *attaching) refer(ctx context.Context, doc []byte, mediaType, title string, subject v1.Descriptor, annotations map[string]string) (string, error) {
	ann := a.created()
	for k, v := range annotations {
		ann[k] = v
	}
	art, err := Artifact(doc, mediaType, mediaType, title, subject, ann)
	if err != nil {
		return "", err
	}
	digest, err := art.Digest()
	if err != nil {
		return "", err
	}
	ref := a.built.Image.Repository + "@" + digest.String()
	s, err := a.dest.WriteManifest(ctx, ref, art)
	a.add(s)
	if err != nil {
		return "", fmt.Errorf("attach %s to %s@%s: %w", mediaType, a.built.Image.Repository, subject.Digest, err)
	}
	return digest.String(), nil
}

// created are the annotations every attached manifest starts from: OCI's creation time when
// SOURCE_DATE_EPOCH (or Options.Created) gives one. The Unix epoch, which stands for no time,
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
	repo, err := name.NewRepository(a.built.Image.Repository, name.Insecure)
	if err != nil {
		return err
	}
	tag, err := SignatureTag(repo, digest)
	if err != nil {
		return err
	}
	existing, err := a.dest.Manifest(ctx, tag.String())
	if err != nil {
		return err
	}
	sigs, err := a.o.Signer.SignatureImage(existing, a.built.Image.Repository, digest)
	if err != nil {
		return err
	}
	if sigs == nil {
		sigs = existing
	} else {
		s, err := a.dest.WriteManifest(ctx, tag.String(), sigs)
		a.add(s)
		if err != nil {
			return fmt.Errorf("sign %s@%s: %w", a.built.Image.Repository, digest, err)
		}
	}
	d, err := sigs.Digest()
	if err != nil {
		return err
	}
	a.attached = append(a.attached, image.Attachment{Kind: "signature", Subject: digest, Digest: d.String(),
		MediaType: MediaTypeSimpleSigning, Reference: tag.String()})
	return nil
}

func (a *attaching) add(s image.Sent) {
	a.sent.Bytes += s.Bytes
	a.sent.Requests += s.Requests
}

// sbom is the SBOM of one platform's image; with shared, the packages are in that SBOM, and
// this one refers to it.
func (a *attaching) sbom(ctx context.Context, p image.BuiltPlatform, digest string, shared *SharedSBOM) ([]byte, error) {
	img, err := a.described(ctx, p.Image, a.built.Image.Tag, digest, p)
	if err != nil {
		return nil, err
	}
	img.Shared = shared
	return img.SBOM(a.o.Format, a.o.Builder, a.o.Created)
}

// sharedSBOM makes the SBOM of the platform's dependencies image, which lists every package
// the image's components have, attaches it to that image unless it is there already (it is
// the same bytes for the same dependencies image: a code change sends none of it), and returns
// how the image's SBOM refers to it; nil for an image without a dependencies image. Digests
// it attached are added to signed.
func (a *attaching) sharedSBOM(ctx context.Context, p image.BuiltPlatform, signed *[]string) (*SharedSBOM, error) {
	if p.Dependencies == nil {
		return nil, nil
	}
	subject, err := imageDescriptor(p.Dependencies)
	if err != nil {
		return nil, err
	}
	img, err := a.described(ctx, p.Dependencies, a.built.Image.DepsTag, subject.Digest.String(), p)
	if err != nil {
		return nil, err
	}
	for i := range img.Components {
		// a component's version is its code's, which the dependencies image does not hold: the
		// same dependencies image, the same SBOM, whatever the code
		img.Components[i].Version = ""
	}
	doc, err := img.SBOM(a.o.Format, a.o.Builder, a.o.Created)
	if err != nil {
		return nil, err
	}
	mt := a.o.Format.MediaType()
	art, err := Artifact(doc, mt, mt, a.o.Format.File(), subject, a.created())
	if err != nil {
		return nil, err
	}
	d, err := art.Digest()
	if err != nil {
		return nil, err
	}
	existing, err := a.dest.Manifest(ctx, a.built.Image.Repository+"@"+d.String())
	if err != nil {
		return nil, err
	}
	if existing == nil {
		if _, err := a.refer(ctx, doc, mt, a.o.Format.File(), subject, nil); err != nil {
			return nil, err
		}
		a.attached = append(a.attached, image.Attachment{Kind: "dependencies sbom", Platform: p.Platform, Subject: subject.Digest.String(),
			Digest: d.String(), MediaType: mt})
		*signed = append(*signed, subject.Digest.String(), d.String())
	}
	return SharedOf(img, doc), nil
}

// described is what an SBOM says of one platform's image of the repository (built on the
// platform's base): its components and what npm installed for them in its layers.
func (a *attaching) described(ctx context.Context, of v1.Image, tag, digest string, p image.BuiltPlatform) (*Image, error) {
	img := &Image{Repository: a.built.Image.Repository, Tag: tag, Digest: digest, Platform: p.Platform,
		Base: Base{Reference: a.built.BaseReference(), Digest: p.BaseDigest}}
	installs, err := a.installsOf(ctx, of)
	if err != nil {
		return nil, err
	}
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

// imageDescriptor describes one platform's image as a subject.
func imageDescriptor(img v1.Image) (v1.Descriptor, error) {
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

// components are the image's components; a service's image has the extension's package.
func components(img *image.Image) []*toa.Component {
	if img.Service == nil {
		return img.Components
	}
	c := &toa.Component{Path: img.Service.Dir, Locator: toa.Locator{ID: img.Service.Reference, Label: path.Base(image.ServiceFolder)},
		Version: img.Service.Version}
	for _, f := range []struct {
		name string
		into *string
	}{{"package.json", &c.PackageJSON}, {"package-lock.json", &c.PackageLock}} {
		if p := filepath.Join(img.Service.Dir, f.name); fileExists(p) {
			*f.into = p
		}
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

// installsOf reads what npm installed from every layer toa-push made of an image; a layer
// that two platforms' images share (the sources) is read once.
func (a *attaching) installsOf(ctx context.Context, img v1.Image) ([]*Install, error) {
	layers, what, err := toaLayers(img)
	if err != nil {
		return nil, err
	}
	if a.read == nil {
		a.read = map[v1.Hash]*Install{}
	}
	var out []*Install
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if image.IsDependencyPart(what[i]) {
			continue // its packages are in the hidden lockfile of the component's first layer
		}
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		in, ok := a.read[d]
		if !ok {
			if in, err = InstalledIn(l); err != nil {
				return nil, fmt.Errorf("read what npm installed from the layer %q: %w", what[i], err)
			}
			a.read[d] = in
		}
		if in != nil {
			out = append(out, in)
		}
	}
	return out, nil
}

// readPackage fills in what the component's package.json says (its name, version, and the
// installed packages it names), and what its lockfile adds to what npm recorded in node_modules
// (resolved URLs and integrity, where the hidden lockfile lacks them).
func readPackage(c *toa.Component, comp *Component) error {
	if c.PackageJSON == "" {
		return nil
	}
	data, err := os.ReadFile(c.PackageJSON)
	if err != nil {
		return fmt.Errorf("read %s: %w", c.PackageJSON, err)
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
	if c.PackageLock == "" {
		return nil
	}
	lock, err := os.Open(c.PackageLock)
	if err != nil {
		return fmt.Errorf("read %s: %w", c.PackageLock, err)
	}
	defer lock.Close()
	locked, err := parseLockfile(io.LimitReader(lock, maxLockfile))
	if err != nil {
		return nil // npm ci read it; what it installed is what counts
	}
	comp.Installed = fillFrom(comp.Installed, locked)
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
		for _, f := range []string{c.PackageJSON, c.PackageLock} {
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
