package artifact

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Fetched is an artifact unpacked into a folder, ready to render as one.
type Fetched struct {
	Reference   string            // repository@digest, what was pulled
	Annotations map[string]string // the manifest's: source, revision, created
	Verified    []string          // what was checked against the key: the artifact, then each image, by repository@digest
}

// Fetch pulls the artifact spec names (oci://REF[@DIGEST]) and unpacks it into dir. With a key,
// the artifact's signature is checked before it is unpacked, and each image its kustomization
// pins after, before anything is returned: an unsigned or mis-signed one is an *Unsigned naming
// it, and an image pinned by tag alone is refused, since a tag proves nothing.
func Fetch(ctx context.Context, spec, dir string, reg Registry, key *ecdsa.PublicKey, limits Limits) (*Fetched, error) {
	ref, err := reg.ParseReference(spec)
	if err != nil {
		return nil, err
	}
	pulled, err := reg.Pull(ctx, ref, limits)
	if err != nil {
		return nil, err
	}
	f := &Fetched{Reference: pulled.Reference.String(), Annotations: pulled.Annotations}
	if key != nil {
		if err := reg.Verify(ctx, pulled.Reference, key, "the artifact"); err != nil {
			return nil, err
		}
		f.Verified = append(f.Verified, f.Reference)
	}
	if err := Unpack(pulled.Content, dir, "the artifact "+f.Reference, limits); err != nil {
		return nil, err
	}
	if key == nil {
		return f, nil
	}
	images, err := PinnedImages(dir)
	if err != nil {
		return nil, fmt.Errorf("the artifact %s: %w", f.Reference, err)
	}
	for _, img := range images {
		if img.Digest == "" {
			return nil, &Unsigned{What: "the image", Reference: img.Repository, Why: "is pinned by a tag, not a digest, so its signature cannot be checked"}
		}
		d, err := reg.digest(img.Repository + "@" + img.Digest)
		if err != nil {
			return nil, fmt.Errorf("the artifact's kustomization pins %s@%s, which is not an image reference: %w", img.Repository, img.Digest, err)
		}
		if err := reg.Verify(ctx, d, key, "the image"); err != nil {
			return nil, err
		}
		f.Verified = append(f.Verified, d.String())
	}
	return f, nil
}

// digest parses REPOSITORY@DIGEST, with plain HTTP allowed under --insecure.
func (r Registry) digest(s string) (name.Digest, error) {
	ref, err := r.reg.Reference(s)
	if err != nil {
		return name.Digest{}, errors.Unwrap(err)
	}
	d, ok := ref.(name.Digest)
	if !ok {
		return name.Digest{}, errors.New("it names no digest")
	}
	return d, nil
}

// Pinned is an image a kustomization sets.
type Pinned struct {
	Repository string // newName where the entry has one, else name
	Digest     string // "" when pinned by tag
}

// PinnedImages reads the images: of the kustomization at the root of dir.
func PinnedImages(dir string) ([]Pinned, error) {
	var data []byte
	var err error
	for _, file := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		data, err = readRegular(filepath.Join(dir, file), 4<<20)
		if !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return nil, &fault.Input{Message: "it has no kustomization.yaml at its root: " + err.Error(),
			Hint: "push the artifact with toa-push --artifact, or flux push artifact --path of a kustomization's folder"}
	}
	var k struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			Digest  string `json:"digest"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, &fault.Input{File: "kustomization.yaml", Message: err.Error()}
	}
	var out []Pinned
	for _, img := range k.Images {
		p := Pinned{Repository: img.Name, Digest: img.Digest}
		if img.NewName != "" {
			p.Repository = img.NewName
		}
		out = append(out, p)
	}
	return out, nil
}

// readRegular reads a regular file of at most max bytes.
func readRegular(file string, max int64) ([]byte, error) {
	info, err := os.Lstat(file)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() || info.Size() > max {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", filepath.Base(file), max)
	}
	return os.ReadFile(file)
}
