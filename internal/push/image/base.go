package image

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// Base is a base image resolved to a digest per platform. Resolving reads manifests only.
type Base struct {
	Ref       string            // as the context names it
	Source    string            // where it is read: Ref, or the mirror's reference
	Mirror    *registry.Mirror  // the mirror it is read through, or nil
	Digest    string            // of the index, or of the single manifest
	Platforms map[string]string // "linux/amd64" → manifest digest
	// Docker is true when the base is in Docker's v2 format (a manifest list, or manifests of
	// Docker's type): images on it are converted to OCI (format.go).
	Docker bool
	Err    error // why it could not be resolved
}

// formatInput is what the tags of images on the base hold of its format: nothing for an OCI
// base, so that its tags are those toa-push always gave; for a Docker base, that the images are
// converted to OCI, so that images written before toa-push converted them (a Docker manifest of
// OCI layers, which containers/image refuses) get new tags and are built again.
func (b *Base) formatInput() []string {
	if b.Docker {
		return []string{"images converted to OCI from Docker v2"}
	}
	return nil
}

// String names the base for messages: its reference, and the mirror it is read from.
func (b *Base) String() string {
	if b.Mirror == nil {
		return "the base " + b.Ref
	}
	return fmt.Sprintf("the base %s from the mirror %s (--mirror %s)", b.Ref, b.Source, b.Mirror)
}

// annotations record where the base was read when a mirror was used: the base's name as the
// context gives it (org.opencontainers.image.base.name), its digest for the platform, and the
// reference read (io.toa.image.base.mirror). A base read from where the context names it adds
// none, so that the same base in two registries gives the same digests.
func (b *Base) annotations(platform string) map[string]string {
	if b == nil || b.Mirror == nil {
		return nil
	}
	a := map[string]string{AnnotationBaseName: b.Ref, AnnotationBaseMirror: b.Source}
	if platform != "" {
		a[AnnotationBaseDigest] = b.Platforms[platform]
	}
	return a
}

// Annotations of images built on a base read from a mirror.
const (
	AnnotationBaseName   = "org.opencontainers.image.base.name"
	AnnotationBaseDigest = "org.opencontainers.image.base.digest"
	AnnotationBaseMirror = "io.toa.image.base.mirror"
)

// Pairs spells the (platform, digest) pairs of the given platforms, sorted: what the dependencies
// hash holds instead of the base's name, so that a mirror or a retag gives the same tags.
func (b *Base) Pairs(platforms []string) string {
	pairs := make([]string, 0, len(platforms))
	for _, p := range platforms {
		pairs = append(pairs, p+"="+b.Platforms[p])
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// Has reports whether the base has an image for platform.
func (b *Base) Has(platform string) bool {
	_, ok := b.Platforms[platform]
	return ok
}

// Select returns the application's platforms that this base can serve. A platform the context
// names and the base lacks is refused; one it only defaulted to is left out with a warning.
func (b *Base) Select(app *toa.Application, warnings *[]string) ([]string, error) {
	var out []string
	for _, p := range app.Registry.Platforms {
		if b.Has(p) {
			out = append(out, p)
			continue
		}
		if app.Registry.PlatformsDefaulted {
			*warnings = append(*warnings, fmt.Sprintf("the base %s has no %s image: %s is left out (name registry.platforms to choose)", b.Ref, p, p))
			continue
		}
		return nil, &fault.Input{File: app.File, Key: "registry.platforms",
			Message: fmt.Sprintf("names %s, and the base %s has no image for it (it has %s)", p, b.Ref, strings.Join(b.platformList(), ", ")),
			Hint:    "remove it from registry.platforms, or choose a base that has it"}
	}
	if len(out) == 0 {
		return nil, &fault.Input{File: app.File, Key: "registry.platforms",
			Message: fmt.Sprintf("none of %s is served by the base %s (it has %s)", strings.Join(app.Registry.Platforms, ", "), b.Ref, strings.Join(b.platformList(), ", ")),
			Hint:    "name platforms the base has, or choose another base"}
	}
	return out, nil
}

func (b *Base) platformList() []string {
	var list []string
	for p := range b.Platforms {
		list = append(list, p)
	}
	sort.Strings(list)
	return list
}

// Platform spells a v1.Platform as Toa's registry.platforms does: os/arch[/variant], with
// arm64's v8 left out since linux/arm64 means it.
func Platform(p *v1.Platform) string {
	if p == nil {
		return ""
	}
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" && !(p.Architecture == "arm64" && p.Variant == "v8") {
		s += "/" + p.Variant
	}
	return s
}

// ResolveBase reads a base's manifest, or its index and nothing more, into its per-platform
// digests, from the mirror that matches it if there is one. The error, if any, is kept in the
// result: a plan can go on without it.
func ResolveBase(ctx context.Context, reg *registry.Registries, ref string) *Base {
	b := &Base{Ref: ref, Source: ref, Platforms: map[string]string{}}
	source, mirror, err := reg.Source(ref)
	if err != nil {
		b.Err = err
		return b
	}
	b.Source, b.Mirror = source, mirror
	r, err := reg.Reference(source)
	if err != nil {
		b.Err = err
		return b
	}
	desc, err := reg.Get(ctx, r)
	if err != nil {
		b.Err = err
		return b
	}
	b.Digest = desc.Digest.String()
	if desc.MediaType == types.DockerManifestSchema1 || desc.MediaType == types.DockerManifestSchema1Signed {
		b.Err = fmt.Errorf("%s is a Docker schema 1 image (%s), a format registries and container runtimes have dropped, which toa-push does not build on: "+
			"copy it once into Docker's v2 or OCI's format (`skopeo copy --format v2s2 docker://%s docker://NEW` or `--format oci`) and name the copy, or choose a newer tag", ref, desc.MediaType, source)
		return b
	}
	b.Docker = desc.MediaType == types.DockerManifestList || desc.MediaType == types.DockerManifestSchema2
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			b.Err = err
			return b
		}
		if err := b.addPlatforms(idx, ref, 0); err != nil {
			b.Err = err
		}
		return b
	}
	img, err := desc.Image()
	if err != nil {
		b.Err = err
		return b
	}
	cfg, err := registry.Bounded(img, source).ConfigFile()
	if err != nil {
		b.Err = fmt.Errorf("read the config of %s: %w", ref, err)
		return b
	}
	b.Platforms[Platform(cfg.Platform())] = desc.Digest.String()
	return b
}

// maxNesting is how deep toa-push follows indexes inside a base's index: OCI allows an index to
// list indexes (what some tools make of per-platform builds), a base of a few levels is rare.
const maxNesting = 3

// addPlatforms records the image of each platform the index lists, the first one listed for a
// platform winning, and of the indexes it lists, depth levels down. Entries without a platform
// or of platform unknown/unknown (buildx's attestations) are not images to build on.
func (b *Base) addPlatforms(idx v1.ImageIndex, ref string, depth int) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("read the index of %s: %w", ref, err)
	}
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex() && depth < maxNesting:
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return fmt.Errorf("read the index %s inside %s: %w", d.Digest, ref, err)
			}
			if err := b.addPlatforms(child, ref, depth+1); err != nil {
				return err
			}
		case d.Platform == nil || d.Platform.OS == "unknown" || !d.MediaType.IsImage():
		default:
			b.Docker = b.Docker || d.MediaType == types.DockerManifestSchema2
			p := Platform(d.Platform)
			if _, seen := b.Platforms[p]; !seen {
				b.Platforms[p] = d.Digest.String()
			}
		}
	}
	return nil
}

// Bases lists the distinct bases the images of a plan with these options stand on, in order:
// the compositions' (or mono's), then the services' base when there are services. Each is to be
// resolved once, and given to NewPlan in opts.Bases.
func Bases(app *toa.Application, opts PlanOptions) ([]string, error) {
	us, err := units(app, opts.Mono)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, u := range us {
		if !slices.Contains(refs, u.base) {
			refs = append(refs, u.base)
		}
	}
	if len(opts.Services) > 0 && !slices.Contains(refs, ServiceBase(app)) {
		refs = append(refs, ServiceBase(app))
	}
	return refs, nil
}

// takeBase gives the image its base from the plan's resolved bases, and says whether the base
// is there to build on. When it is not, the image's tags stay unresolved, its platforms are the
// application's, and Unresolved says why: the one wording of it, for every kind of image.
func (img *Image) takeBase(app *toa.Application, opts PlanOptions) (*Base, bool) {
	base := opts.Bases[img.Base]
	img.BaseSource, img.base = img.Base, base
	if base != nil && base.Mirror != nil {
		img.BaseSource, img.Mirror = base.Source, base.Mirror.String()
	}
	switch {
	case base == nil:
		img.Unresolved = fmt.Sprintf("the base %s is not resolved yet", img.Base)
	case base.Err != nil:
		img.Unresolved = fmt.Sprintf("%s could not be resolved: %s", base, registry.Reason(base.Err))
	default:
		return base, true
	}
	img.Platforms = app.Registry.Platforms
	return nil, false
}
