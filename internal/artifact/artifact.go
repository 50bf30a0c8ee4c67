// Package artifact is the deployment as an OCI artifact in Flux's format: the kustomization
// toa-push wrote, as one tar+gzip layer of an image manifest whose config says it is Flux's, as
// `flux push artifact` writes it (fluxcd/pkg/oci, push.go); and the way back: pull one
// (bounded, digests verified), check its cosign signature and those of the images it pins, and
// unpack it into a folder without letting a path escape it.
//
// It is a room of its own because both commands use it, toa-push to make and toa-apply to
// read, and toa-apply links nothing of the push chain: besides go-containerregistry and the
// standard library it imports of ours only fault, registry (the one registry client, which
// imports nothing of the push chain either, so that a pull is bounded as toa-push's reads are)
// and sign (cosign's format, checked as it is written).
// pipeline writes what New makes through its own destination (a registry or an OCI layout) and
// signs it with image.Sign, in sign/'s format.
package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Flux's media types and annotations (fluxcd/pkg/oci: globals.go, constants.go).
const (
	MediaTypeConfig  types.MediaType = "application/vnd.cncf.flux.config.v1+json"
	MediaTypeContent types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"

	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationCreated  = "org.opencontainers.image.created"
)

// Metadata is what the artifact's annotations say of where it came from, as `flux push
// artifact --source --revision` writes them.
type Metadata struct {
	Source   string    // a URL of the sources, e.g. the Git remote
	Revision string    // e.g. "main@sha1:<commit>"
	Created  time.Time // SOURCE_DATE_EPOCH, for a reproducible digest
}

func (m Metadata) annotations() map[string]string {
	return map[string]string{
		AnnotationCreated:  m.Created.UTC().Format(time.RFC3339),
		AnnotationSource:   m.Source,
		AnnotationRevision: m.Revision,
	}
}

// New makes the artifact of files (a folder's files by their slash-separated paths) as Flux's
// client does: the empty image with OCI's manifest type and Flux's config type, the config's
// created time, the annotations, and one layer of the files as a deterministic tar+gzip. The
// same files and metadata give the same digest.
func New(files map[string][]byte, meta Metadata) (v1.Image, error) {
	tgz, err := Tar(files, meta.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tgz)), nil
	}, tarball.WithMediaType(MediaTypeContent))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, MediaTypeConfig)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg.Created = v1.Time{Time: meta.Created.UTC()}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	img = mutate.Annotations(img, meta.annotations()).(v1.Image)
	return mutate.Append(img, mutate.Addendum{Layer: layer})
}

// Tar writes files as a gzipped tar, reproducibly: entries sorted, the folders they are in
// before them, owner 0, modes 0644 and 0755, every time mtime, no user or group names, gzip at a
// fixed level with no name or time in its header.
func Tar(files map[string][]byte, mtime time.Time) ([]byte, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		if clean := path.Clean(name); clean != name || name == "." || path.IsAbs(name) || strings.HasPrefix(name, "../") || name == ".." {
			return nil, fmt.Errorf("the artifact's file %q is not a relative path inside its folder", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	dirs := map[string]bool{}
	for _, name := range names {
		for _, dir := range parents(name) {
			if dirs[dir] {
				continue
			}
			dirs[dir] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: mtime}); err != nil {
				return nil, err
			}
		}
		data := files[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parents are the folders a path is in, outermost first: "a/b/c" has "a" and "a/b".
func parents(name string) []string {
	var out []string
	for i, r := range name {
		if r == '/' {
			out = append(out, name[:i])
		}
	}
	return out
}

// IsFlux says whether img is a Flux artifact: its config is Flux's.
func IsFlux(img v1.Image) bool {
	m, err := img.Manifest()
	return err == nil && m.Config.MediaType == MediaTypeConfig
}
