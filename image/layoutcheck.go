package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/fsys"
)

// maxLayoutManifest is the most toa-push reads of an index, a manifest or a config in an OCI
// layout: the registries' own bound for a manifest (Distribution's is 4 MiB).
const maxLayoutManifest = 4 << 20

// checkTree checks, before go-containerregistry reads any of it (it reads a manifest whole, as
// large as the file is, and waits on a named pipe), the blobs of the index digest names in the
// layout: every index, manifest and config a regular file within maxLayoutManifest whose bytes
// are its digest and size, every layer a regular file of its size. A layout carried across an air
// gap is input: what is wrong is an *fault.Input naming the blob.
func (l *Layout) checkTree(digest string) error {
	entries, err := l.entries()
	if err != nil {
		return err
	}
	for _, d := range entries {
		if d.Digest.String() == digest {
			return l.checkBlob(d, 0)
		}
	}
	return nil // not listed: go-containerregistry says so
}

func (l *Layout) checkBlob(d v1.Descriptor, depth int) error {
	if depth > 3 {
		return &fault.Input{File: l.dir, Message: fmt.Sprintf("nests indexes more than three deep at %s", d.Digest)}
	}
	file := filepath.Join(l.dir, "blobs", d.Digest.Algorithm, d.Digest.Hex)
	if !d.MediaType.IsIndex() && !d.MediaType.IsImage() {
		return l.checkLayer(file, d)
	}
	data, err := l.readBlob(file, d)
	if err != nil {
		return err
	}
	if d.MediaType.IsIndex() {
		var m v1.IndexManifest
		if err := json.Unmarshal(data, &m); err != nil {
			return &fault.Input{File: file, Message: "is not an OCI index: " + err.Error()}
		}
		for _, child := range m.Manifests {
			if err := l.checkBlob(child, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	var m v1.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return &fault.Input{File: file, Message: "is not an OCI image manifest: " + err.Error()}
	}
	if _, err := l.readBlob(filepath.Join(l.dir, "blobs", m.Config.Digest.Algorithm, m.Config.Digest.Hex), m.Config); err != nil {
		return err
	}
	for _, layer := range m.Layers {
		if err := l.checkLayer(filepath.Join(l.dir, "blobs", layer.Digest.Algorithm, layer.Digest.Hex), layer); err != nil {
			return err
		}
	}
	return nil
}

// readBlob reads a blob that is read whole, within maxLayoutManifest, and checks its digest.
func (l *Layout) readBlob(file string, d v1.Descriptor) ([]byte, error) {
	hint := "write the layout again with toa-push --oci-layout, and carry it whole"
	if d.Size > maxLayoutManifest || d.Size < 0 {
		return nil, &fault.Input{File: file, Hint: hint, Message: fmt.Sprintf("is declared %d bytes, more than the %s toa-push reads of a manifest or config",
			d.Size, fsys.BytesText(maxLayoutManifest))}
	}
	if d.Digest.Algorithm != "sha256" {
		return nil, &fault.Input{File: file, Hint: hint, Message: "is named by a " + d.Digest.Algorithm + " digest: toa-push reads sha256 blobs"}
	}
	f, err := fsys.Open(file, maxLayoutManifest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, d.Size+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != d.Size || hex.EncodeToString(sum[:]) != d.Digest.Hex {
		return nil, &fault.Input{File: file, Hint: hint, Message: fmt.Sprintf("does not hold the %d bytes of %s its index declares", d.Size, d.Digest)}
	}
	return data, nil
}

// checkLayer checks that a layer is a regular file of its declared size: its bytes are streamed
// and checked against its digest by the registry that receives them.
func (l *Layout) checkLayer(file string, d v1.Descriptor) error {
	info, err := os.Stat(file)
	if err != nil {
		return &fault.Input{File: file, Message: "is missing from the layout", Err: err,
			Hint: "write the layout again with toa-push --oci-layout, and carry it whole"}
	}
	if !info.Mode().IsRegular() {
		return &fault.Input{File: file, Message: "is " + fsys.Kind(info) + ", not a regular file"}
	}
	if info.Size() != d.Size {
		return &fault.Input{File: file, Message: fmt.Sprintf("is %d bytes, not the %d of %s its manifest declares", info.Size(), d.Size, d.Digest),
			Hint: "write the layout again with toa-push --oci-layout, and carry it whole"}
	}
	return nil
}
