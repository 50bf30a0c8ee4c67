// Package layout is an OCI image layout on disk (image-spec's image-layout.md) as a push
// destination, and the push of such a layout to a registry. toa-push --oci-layout writes the
// application's images into one (Open: a *Layout is an image.Destination, so image.Push builds
// into it as into a registry), with what is attached to them (SBOMs, provenance, signatures) and
// every blob of their bases; toa-push --from-oci-layout, on a machine that reaches the registry,
// reads it back (Read) and pushes it there (Push), without the sources. CheckDir refuses, before
// any work, a folder a layout should not be written into.
//
// It is a room of its own beside image (issue 37): image builds and pushes images to any
// image.Destination and knows nothing of layouts; layout imports image, never the reverse.
// go-containerregistry has a package of the same name, imported here as ggcrlayout.
package layout

import (
	"bytes"
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
	"sort"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ggcrlayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
)

// Annotations of the entries of a layout's index.json.
const (
	// AnnotationImageName is the whole reference an index is pushed to, as containerd and
	// BuildKit name the images of a layout.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is its tag (OCI image layout's own annotation).
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationContext and AnnotationEnvironment say whose images the layout holds.
	AnnotationContext     = "io.toa.context"
	AnnotationEnvironment = "io.toa.environment"
)

// Layout is an OCI image layout on disk, as an image.Destination: every index written to it is
// kept with the blobs of its images, the base's layers included, so that the layout can be
// carried to a registry this machine cannot reach and pushed there (Push) without the sources.
//
// Each index is an entry of index.json named by the reference it is to be pushed to
// (AnnotationImageName, and its tag as AnnotationRefName). Blobs are written to a temporary file,
// checked against their digest and renamed into place, and index.json is rewritten whole after
// the blobs of its new entry: an interrupted write leaves no entry for an incomplete index, and
// a rerun finishes it.
type Layout struct {
	dir         string
	annotations map[string]string

	mu sync.Mutex // index.json
}

// A *Layout is a destination image.Push writes into as into a registry.
var _ image.Destination = (*Layout)(nil)

// Entry is one index of a layout.
type Entry struct {
	Reference    string // where it is pushed: "registry.internal/shop/composition-front:1a2b3c4d"
	Digest       string
	Annotations  map[string]string
	ArtifactType string // of an attachment (Attachments), "" for an image
}

// Repository is the entry's reference without its tag.
func (e Entry) Repository() string {
	r, err := name.ParseReference(e.Reference, name.Insecure)
	if err != nil {
		return e.Reference
	}
	return r.Context().Name()
}

// Tag is the entry's tag.
func (e Entry) Tag() string { return e.Annotations[AnnotationRefName] }

// Open opens the OCI layout in dir for writing, or makes one there when dir is missing or
// empty. A folder that holds something else is refused, never written into. The annotations
// are added to every entry written (the context and environment of the images).
func Open(dir string, annotations map[string]string) (*Layout, error) {
	l := &Layout{dir: dir, annotations: annotations}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist), err == nil && len(entries) == 0:
		if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
			return nil, fmt.Errorf("make the OCI layout %s: %w", dir, err)
		}
		if err := fsys.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion": "1.0.0"}`), 0o644); err != nil {
			return nil, err
		}
		if err := l.writeIndexJSON(nil); err != nil {
			return nil, err
		}
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("open the OCI layout %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, fmt.Errorf("%s is neither empty nor an OCI image layout (it has no oci-layout file): name another folder", dir)
	}
	if _, err := l.entries(); err != nil {
		return nil, err
	}
	return l, nil
}

// Read opens an existing OCI layout for reading.
func Read(dir string) (*Layout, error) {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout (it has no oci-layout file)", dir)
	}
	l := &Layout{dir: dir}
	if _, err := l.entries(); err != nil {
		return nil, err
	}
	return l, nil
}

// Dir is the layout's folder.
func (l *Layout) Dir() string { return l.dir }

// Entries lists the layout's indexes that name the reference they are pushed to, in the order
// of index.json: by reference.
func (l *Layout) Entries() ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.entries()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, d := range m {
		if ref := d.Annotations[AnnotationImageName]; ref != "" && d.MediaType.IsIndex() {
			out = append(out, Entry{Reference: ref, Digest: d.Digest.String(), Annotations: d.Annotations})
		}
	}
	return out, nil
}

// Digest returns the digest of the index the layout holds for ref, or "".
func (l *Layout) Digest(_ context.Context, ref string) (string, error) {
	entries, err := l.Entries()
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Reference == ref {
			return e.Digest, nil
		}
	}
	return "", nil
}

// Index returns the index the layout holds for ref, or nil.
func (l *Layout) Index(ctx context.Context, ref string) (v1.ImageIndex, error) {
	digest, err := l.Digest(ctx, ref)
	if err != nil || digest == "" {
		return nil, err
	}
	return l.index(digest)
}

func (l *Layout) index(digest string) (v1.ImageIndex, error) {
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, err
	}
	if err := l.checkTree(digest); err != nil {
		return nil, err
	}
	root, err := ggcrlayout.ImageIndexFromPath(l.dir)
	if err != nil {
		return nil, fmt.Errorf("read the OCI layout %s: %w", l.dir, err)
	}
	idx, err := root.ImageIndex(h)
	if err != nil {
		return nil, fmt.Errorf("read %s from the OCI layout %s: %w", digest, l.dir, err)
	}
	return idx, nil
}

// Write writes the blobs of the index that the layout lacks, the layers of its images from
// wherever they are (the cache, the base's registry or mirror), then its entry in index.json,
// replacing an entry of the same reference.
func (l *Layout) Write(ctx context.Context, ref string, idx v1.ImageIndex) (image.Sent, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return image.Sent{}, fmt.Errorf("'%s' is not an image reference: %w", ref, err)
	}
	written, err := l.writeIndex(ctx, idx)
	if err != nil {
		return image.Sent{Bytes: written}, fmt.Errorf("write %s into the OCI layout %s: %w", ref, l.dir, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return image.Sent{Bytes: written}, err
	}
	size, err := idx.Size()
	if err != nil {
		return image.Sent{Bytes: written}, err
	}
	mt, err := idx.MediaType()
	if err != nil {
		return image.Sent{Bytes: written}, err
	}
	annotations := map[string]string{AnnotationImageName: ref, AnnotationRefName: r.Identifier()}
	for k, v := range l.annotations {
		if v != "" {
			annotations[k] = v
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.entries()
	if err != nil {
		return image.Sent{Bytes: written}, err
	}
	kept := m[:0]
	for _, d := range m {
		if d.Annotations[AnnotationImageName] != ref {
			kept = append(kept, d)
		}
	}
	kept = append(kept, v1.Descriptor{MediaType: mt, Size: size, Digest: digest, Annotations: annotations})
	// in the order of their references, not of the builds that finished first: the same
	// images make the same index.json
	sort.SliceStable(kept, func(i, j int) bool {
		return kept[i].Annotations[AnnotationImageName] < kept[j].Annotations[AnnotationImageName]
	})
	return image.Sent{Bytes: written}, l.writeIndexJSON(kept)
}

// entries reads index.json's descriptors; l.mu is held, or l is not shared yet.
func (l *Layout) entries() ([]v1.Descriptor, error) {
	data, err := fsys.ReadFile(filepath.Join(l.dir, "index.json"), fsys.MaxLockSize)
	if err != nil {
		return nil, fmt.Errorf("read the OCI layout %s: %w", l.dir, err)
	}
	var m v1.IndexManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("read the OCI layout %s: index.json: %w", l.dir, err)
	}
	return m.Manifests, nil
}

func (l *Layout) writeIndexJSON(manifests []v1.Descriptor) error {
	if manifests == nil {
		manifests = []v1.Descriptor{}
	}
	m := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: manifests}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsys.WriteFile(filepath.Join(l.dir, "index.json"), append(data, '\n'), 0o644)
}

// writeIndex writes every blob of an index the layout lacks, children first, and returns the
// bytes written.
func (l *Layout) writeIndex(ctx context.Context, idx v1.ImageIndex) (int64, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, d := range m.Manifests {
		var n int64
		switch {
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err != nil {
				return total, err
			}
			n, err = l.writeImage(ctx, img)
			if err != nil {
				return total + n, err
			}
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return total, err
			}
			n, err = l.writeIndex(ctx, child)
			if err != nil {
				return total + n, err
			}
		default:
			return total, fmt.Errorf("the index holds a %s, which toa-push does not write", d.MediaType)
		}
		total += n
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return total, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return total, err
	}
	n, err := l.writeBytes(digest, raw)
	return total + n, err
}

func (l *Layout) writeImage(ctx context.Context, img v1.Image) (int64, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	written := make([]int64, len(layers))
	err = image.Parallel(ctx, len(layers), 4, func(ctx context.Context, i int) error {
		digest, err := layers[i].Digest()
		if err != nil {
			return err
		}
		size, err := layers[i].Size()
		if err != nil {
			return err
		}
		written[i], err = l.writeBlob(digest, size, layers[i].Compressed)
		if err != nil {
			return fmt.Errorf("layer %s: %w", digest, err)
		}
		return nil
	})
	var total int64
	for _, n := range written {
		total += n
	}
	if err != nil {
		return total, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return total, err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return total, err
	}
	n, err := l.writeBytes(configName, config)
	total += n
	if err != nil {
		return total, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return total, err
	}
	digest, err := img.Digest()
	if err != nil {
		return total, err
	}
	n, err = l.writeBytes(digest, raw)
	return total + n, err
}

func (l *Layout) writeBytes(digest v1.Hash, data []byte) (int64, error) {
	return l.writeBlob(digest, int64(len(data)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// writeBlob writes a blob unless the layout has it, through a temporary file that is renamed
// into place once its digest and size are checked. It returns the bytes written.
func (l *Layout) writeBlob(digest v1.Hash, size int64, open func() (io.ReadCloser, error)) (int64, error) {
	if digest.Algorithm != "sha256" {
		return 0, fmt.Errorf("blob %s: toa-push writes sha256 blobs only", digest)
	}
	dir := filepath.Join(l.dir, "blobs", digest.Algorithm)
	file := filepath.Join(dir, digest.Hex)
	if info, err := os.Stat(file); err == nil && info.Size() == size {
		return 0, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	rc, err := open()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	tmp, err := fsys.Create(dir, 0o644)
	if err != nil {
		return 0, err
	}
	defer tmp.Discard()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), rc)
	if err != nil {
		return n, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest.Hex || n != size {
		return n, fmt.Errorf("blob %s: read %d bytes with digest sha256:%s, want %d bytes", digest, n, got, size)
	}
	if err := tmp.Commit(file); err != nil {
		return n, err
	}
	return n, nil
}

// Push pushes every index of the layout to the registry its reference names: the
// dependencies images first, then the application's images, whose base and dependency layers
// are then found in the registry and not sent again. What the registry has is not sent; each
// tag goes last. The result lists the application's images (not the dependencies images), with
// the digests the layout holds.
func Push(ctx context.Context, l *Layout, opts image.PushOptions) (*image.Result, error) {
	opts = opts.WithDefaults()
	entries, err := l.Entries()
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("the OCI layout %s holds no image that names where it goes (annotation %s): write it with toa-push --oci-layout", l.dir, AnnotationImageName)
	}
	var deps, apps []Entry
	for _, e := range entries {
		if strings.HasPrefix(e.Tag(), "deps-") {
			deps = append(deps, e)
		} else {
			apps = append(apps, e)
		}
	}
	lp := &layoutPush{l: l, opts: opts, result: &image.Result{}}
	for _, e := range apps {
		lp.result.Images = append(lp.result.Images, &image.Pushed{Name: path.Base(e.Repository()), Repository: e.Repository(),
			Tag: e.Tag(), Digest: e.Digest})
	}
	// the dependencies images first, then what is attached to the images the registry lacks, and
	// the images last: their tags are the last thing written
	if err := lp.copyAll(ctx, deps); err != nil {
		return nil, err
	}
	if err := lp.attachments(ctx, apps); err != nil {
		return nil, err
	}
	if err := lp.copyAll(ctx, apps); err != nil {
		return nil, err
	}
	return lp.result, nil
}

// layoutPush is one Push: the layout, where it goes, and what was pushed so far.
type layoutPush struct {
	l      *Layout
	opts   image.PushOptions
	mu     sync.Mutex // guards result's counters
	result *image.Result
}

// pushedOf is the application image a layout entry counts for: its own, or for a dependencies
// image the application's image of its repository.
func (lp *layoutPush) pushedOf(e Entry) *image.Pushed {
	p := &image.Pushed{}
	for _, q := range lp.result.Images {
		if q.Repository == e.Repository() {
			p = q
		}
	}
	return p
}

// copyAll writes the entries the destination lacks, opts.Jobs at once.
func (lp *layoutPush) copyAll(ctx context.Context, list []Entry) error {
	return image.Parallel(ctx, len(list), lp.opts.Jobs, func(ctx context.Context, i int) error {
		return lp.copy(ctx, list[i])
	})
}

func (lp *layoutPush) copy(ctx context.Context, e Entry) error {
	p, dest, events := lp.pushedOf(e), lp.opts.Destination, lp.opts.Events
	idx, err := lp.l.index(e.Digest)
	if err != nil {
		return err
	}
	if err := image.CheckOCI(idx); err != nil {
		return fault.BadInput(fmt.Errorf("the OCI layout %s holds %s in a form toa-push does not push: %w; write the layout again with this toa-push's --oci-layout", lp.l.dir, e.Reference, err))
	}
	if p.Tag == e.Tag() {
		p.Platforms = platformsOf(idx)
	}
	have, err := dest.Digest(ctx, e.Reference)
	if err != nil {
		return err
	}
	if have == e.Digest {
		events(image.Event{Image: path.Base(e.Repository()), Message: "exists " + e.Reference})
		return nil
	}
	events(image.Event{Image: path.Base(e.Repository()), Message: "pushing " + e.Reference})
	sent, err := dest.Write(ctx, e.Reference, idx)
	lp.mu.Lock()
	p.BytesSent, p.Requests = p.BytesSent+sent.Bytes, p.Requests+sent.Requests
	if p.Tag == e.Tag() {
		p.Copied = true
	}
	lp.mu.Unlock()
	if err != nil {
		return err
	}
	events(image.Event{Image: path.Base(e.Repository()), Message: fmt.Sprintf("pushed %s@%s", e.Repository(), e.Digest)})
	return nil
}

// attachments pushes what the layout attaches to the application images the destination lacks,
// before their tags.
func (lp *layoutPush) attachments(ctx context.Context, apps []Entry) error {
	attachments, err := lp.l.Attachments()
	if err != nil || len(attachments) == 0 {
		return err
	}
	lacking := map[string]bool{}
	for _, e := range apps {
		have, err := lp.opts.Destination.Digest(ctx, e.Reference)
		if err != nil {
			return err
		}
		if have != e.Digest {
			lacking[e.Repository()] = true
		}
	}
	for _, a := range attachments {
		if !lacking[a.Repository()] {
			continue
		}
		for _, p := range lp.result.Images {
			if p.Repository == a.Repository() {
				p.Attachments = append(p.Attachments, image.Attachment{Kind: attachmentKind(a), Digest: a.Digest,
					MediaType: a.ArtifactType, Reference: a.Reference})
			}
		}
	}
	lp.opts.Events(image.Event{Image: "attachments", Message: fmt.Sprintf("pushing what is attached to %d images", len(lacking))})
	return pushAttachments(ctx, lp.l, lp.opts.Destination, lacking)
}

func platformsOf(idx v1.ImageIndex) []string {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range m.Manifests {
		if d.Platform != nil {
			out = append(out, image.Platform(d.Platform))
		}
	}
	return out
}
