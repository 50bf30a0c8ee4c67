package layer

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// tarWriter writes a tar stream that depends only on the files' names, contents, symlink targets,
// execute bits and hard links: every header has the same mtime, uid and gid 0 with no names, and
// a mode of 0755 for directories and executables, 0644 for other files. Directories are written
// before what they hold; a directory's entries in byte order of their names. The format is
// USTAR, or PAX only where USTAR cannot hold a name or a link target.
type tarWriter struct {
	tw      *tar.Writer
	mtime   time.Time
	written map[string]bool // directories already written, "a/b/" with the slash
	buf     []byte
	// names are the files of more than one name written so far, by inode: the first name
	// written, which the others link to
	names map[fileID]string
}

// fileID is a file of the machine: its device and inode.
type fileID struct{ dev, ino uint64 }

func newTarWriter(w io.Writer, mtime time.Time) *tarWriter {
	return &tarWriter{tw: tar.NewWriter(w), mtime: mtime, written: map[string]bool{}, buf: make([]byte, 256<<10),
		names: map[fileID]string{}}
}

// Close writes the end of the archive.
func (w *tarWriter) Close() error { return w.tw.Close() }

func (w *tarWriter) header(typ byte, name string, mode int64) *tar.Header {
	return &tar.Header{Typeflag: typ, Name: name, Mode: mode, ModTime: w.mtime, Format: tar.FormatUnknown}
}

// dir writes the directory name (slash-separated, without a leading slash) and, first, every
// parent of it not yet written.
func (w *tarWriter) dir(name string) error {
	name = strings.Trim(name, "/")
	if name == "" || name == "." {
		return nil
	}
	if w.written[name+"/"] {
		return nil
	}
	if err := w.dir(path.Dir(name)); err != nil {
		return err
	}
	w.written[name+"/"] = true
	return w.tw.WriteHeader(w.header(tar.TypeDir, name+"/", 0o755))
}

// file writes a regular file of size bytes read from r; executable gives it mode 0755.
func (w *tarWriter) file(name string, executable bool, size int64, r io.Reader) error {
	if err := w.dir(path.Dir(name)); err != nil {
		return err
	}
	mode := int64(0o644)
	if executable {
		mode = 0o755
	}
	h := w.header(tar.TypeReg, name, mode)
	h.Size = size
	if err := w.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyBuffer(w.tw, io.LimitReader(r, size), w.buf)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s changed while it was read: %d bytes of %d", name, n, size)
	}
	return nil
}

// data writes a regular file with the given contents.
func (w *tarWriter) data(name string, data []byte) error {
	return w.file(name, false, int64(len(data)), bytes.NewReader(data))
}

// symlink writes a symbolic link to target, as it is.
func (w *tarWriter) symlink(name, target string) error {
	if err := w.dir(path.Dir(name)); err != nil {
		return err
	}
	h := w.header(tar.TypeSymlink, name, 0o777)
	h.Linkname = target
	return w.tw.WriteHeader(h)
}

// treeOptions say what a tree walk leaves out and adds.
type treeOptions struct {
	// skip is the set of names left out at any depth, whatever their type.
	skip map[string]bool
	// ignore, when set, leaves out what it is true for: paths relative to the tree's root,
	// slash-separated; a folder it leaves out is not read.
	ignore func(rel string) bool
	// extra are files written at the root of the tree unless the tree has a file of that name.
	extra map[string][]byte
}

// tree writes the folder src under the name dst: dst itself, then everything in it, recursively.
// Symbolic links are written as links; a file of several names (hard links, as esbuild's
// install makes of its binary) as a file under the first name written and as hard links to it
// under the others, as GNU tar writes them, so that its bytes are in the layer once; sockets,
// pipes and devices are left out.
func (w *tarWriter) tree(src, dst string, o treeOptions) error {
	if err := w.dir(dst); err != nil {
		return err
	}
	return w.walk(src, strings.Trim(dst, "/"), "", o)
}

// walk writes what is in src under dst; rel is src's path relative to the tree's root, "" for the
// root itself.
func (w *tarWriter) walk(src, dst, rel string, o treeOptions) error {
	root := rel == ""
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	type entry struct {
		name  string
		d     fs.DirEntry // nil for an extra file
		extra []byte
	}
	list := make([]entry, 0, len(entries)+len(o.extra))
	present := map[string]bool{}
	for _, d := range entries {
		present[d.Name()] = true
		if !o.skip[d.Name()] && (o.ignore == nil || !o.ignore(path.Join(rel, d.Name()))) {
			list = append(list, entry{name: d.Name(), d: d})
		}
	}
	if root {
		for name, data := range o.extra {
			if !present[name] {
				list = append(list, entry{name: name, extra: data})
			}
		}
		sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	}
	for _, e := range list {
		from := filepath.Join(src, e.name)
		to := path.Join(dst, e.name)
		if e.d == nil {
			if err := w.data(to, e.extra); err != nil {
				return err
			}
			continue
		}
		switch t := e.d.Type(); {
		case t.IsDir():
			if err := w.dir(to); err != nil {
				return err
			}
			if err := w.walk(from, to, path.Join(rel, e.name), o); err != nil {
				return err
			}
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := w.symlink(to, target); err != nil {
				return err
			}
		case t.IsRegular():
			if err := w.regular(from, to); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *tarWriter) regular(from, to string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() { // replaced since the directory was read
		return fmt.Errorf("%s is no longer a regular file", from)
	}
	executable := info.Mode().Perm()&0o111 != 0
	if id, links, ok := inode(info); ok && links > 1 {
		if first, seen := w.names[id]; seen {
			return w.hardlink(to, first, executable)
		}
		w.names[id] = to
	}
	return w.file(to, executable, info.Size(), f)
}

// hardlink writes name as a hard link to target, a file written earlier in the stream.
func (w *tarWriter) hardlink(name, target string, executable bool) error {
	if err := w.dir(path.Dir(name)); err != nil {
		return err
	}
	mode := int64(0o644)
	if executable {
		mode = 0o755
	}
	h := w.header(tar.TypeLink, name, mode)
	h.Linkname = target
	return w.tw.WriteHeader(h)
}
