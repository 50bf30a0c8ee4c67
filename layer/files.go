package layer

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// File is one entry of a layer that Files writes: a file or a folder of this machine copied
// whole (Source), a file of the given contents (Data), a symbolic link (Link), or an empty
// folder (Dir).
type File struct {
	Name       string // in the image, slash-separated, without a leading slash
	Source     string // a file or a folder of this machine
	Data       []byte
	Link       string // a symbolic link's target, as it is
	Dir        bool
	Executable bool // a Data file's mode is 0755
}

// Files is a layer of the given entries, written as every layer of this package is (sorted,
// owner 0, modes 0755 and 0644, the epoch of WithEpoch or SOURCE_DATE_EPOCH, the same gzip), for
// images that are not an application's: the tests' base images. The folders above each entry
// are written before it. The layer is kept in the cache under a key of the entries: the names,
// the data, and the paths, sizes and modification times of the sources, so that a second call
// with the same files reads nothing but their metadata.
func Files(files []File, opts ...Option) (v1.Layer, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	mtime, err := o.mtime()
	if err != nil {
		return nil, err
	}
	o.epoch = &mtime
	sorted := make([]File, len(files))
	for i, f := range files {
		f.Name = strings.Trim(path.Clean("/"+f.Name), "/")
		sorted[i] = f
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	key := newKey("files")
	key.field("mtime", fmt.Sprint(mtime.Unix()))
	for i, f := range sorted {
		if f.Name == "" || (i > 0 && sorted[i-1].Name == f.Name) {
			return nil, fmt.Errorf("a layer's entries need distinct names: '%s'", f.Name)
		}
		if err := f.addTo(key); err != nil {
			return nil, err
		}
	}
	k := key.String()
	if l := o.lookup("files", k); l != nil {
		return l, nil
	}
	l, err := o.writeLayer(func(w *tarWriter) error {
		for _, f := range sorted {
			if err := f.write(w); err != nil {
				return fmt.Errorf("%s: %w", f.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, o.keep("files", k, l)
}

// addTo writes what the entry's bytes depend on into the cache key.
func (f File) addTo(key *keyHash) error {
	key.field("name", f.Name)
	switch {
	case f.Source != "":
		return filepath.WalkDir(f.Source, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			key.field("source", fmt.Sprintf("%s %d %d %s", p, info.Size(), info.ModTime().UnixNano(), info.Mode()))
			return nil
		})
	case f.Link != "":
		key.field("link", f.Link)
	case f.Dir:
		key.field("dir", "")
	default:
		key.field("data", fmt.Sprintf("%x %t", sha256.Sum256(f.Data), f.Executable))
	}
	return nil
}

func (f File) write(w *tarWriter) error {
	switch {
	case f.Source != "":
		info, err := os.Stat(f.Source)
		if err != nil {
			return err
		}
		if info.IsDir() {
			return w.tree(f.Source, f.Name, treeOptions{})
		}
		return w.regular(f.Source, f.Name)
	case f.Link != "":
		return w.symlink(f.Name, f.Link)
	case f.Dir:
		return w.dir(f.Name)
	}
	if err := w.dir(path.Dir(f.Name)); err != nil {
		return err
	}
	return w.file(f.Name, f.Executable, int64(len(f.Data)), strings.NewReader(string(f.Data)))
}
