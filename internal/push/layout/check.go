package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
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

// layoutNames are the entries of an OCI image layout's folder (image-spec's image-layout.md).
var layoutNames = map[string]bool{"oci-layout": true, "index.json": true, "blobs": true}

// CheckDir refuses, as a *fault.Input that names what it holds, a folder toa-push should
// not write an OCI layout into: one that holds files and is no layout (no oci-layout file), or a
// layout that holds more than oci-layout, index.json, blobs/ and the entries named in also (the
// kustomization folder written beside the images), besides what toa-push leaves while writing
// (fsys.PartialPrefix files, a folder's ".NAME.new-" while it is replaced). A missing or empty
// folder is fine (Open makes the layout), and so is an existing layout: toa-push adds to it.
func CheckDir(dir string, also ...string) error {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return nil // missing, or made by Open, which says why it cannot be
	}
	hint := "give --oci-layout a folder of its own (a missing or empty one), or an OCI layout toa-push wrote"
	allowed := func(name string) bool {
		if layoutNames[name] || strings.HasPrefix(name, fsys.PartialPrefix) {
			return true
		}
		for _, a := range also {
			if name == a || strings.HasPrefix(name, "."+a+".new-") {
				return true
			}
		}
		return false
	}
	var foreign []string
	isLayout := false
	for _, e := range entries {
		if e.Name() == "oci-layout" {
			isLayout = true
		}
		if !allowed(e.Name()) {
			foreign = append(foreign, e.Name())
		}
	}
	if !isLayout {
		return &fault.Input{File: dir, Hint: hint, Message: "is neither empty nor an OCI image layout: it has no oci-layout file, and holds " + someNames(entries)}
	}
	if len(foreign) > 0 {
		return &fault.Input{File: dir, Hint: hint + "; or move what it holds besides the layout elsewhere",
			Message: "is an OCI image layout that holds files toa-push does not write there: " + someOf(foreign)}
	}
	if info, err := os.Stat(filepath.Join(dir, "blobs")); err == nil && !info.IsDir() {
		what := fsys.Kind(info)
		if info.Mode().IsRegular() {
			what = "a file"
		}
		return &fault.Input{File: filepath.Join(dir, "blobs"), Hint: hint, Message: "is " + what + ", not the layout's folder of blobs"}
	}
	return nil
}

func someNames(entries []os.DirEntry) string {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return someOf(names)
}

// someOf lists the first names, sorted, and how many more there are.
func someOf(names []string) string {
	sort.Strings(names)
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
}
