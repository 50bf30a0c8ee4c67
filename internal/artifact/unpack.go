package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Unpack writes the files of a tar+gzip into dir, which must be empty or missing: regular files
// and folders only (a symbolic or hard link, a device, a pipe is refused, so that nothing written
// or read later can lead outside dir), every path relative and inside dir, at most limits.Files
// entries and limits.Unpacked bytes. what names the archive in errors. On an error dir is left
// as it was made and the caller removes it.
func Unpack(tgz []byte, dir, what string, limits Limits) error {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return fmt.Errorf("%s: its layer is not gzip: %w", what, err)
	}
	tr := tar.NewReader(zr)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var total int64
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: its tar: %w", what, err)
		}
		if entries >= limits.Files {
			return fmt.Errorf("%s holds more than %d files, more than a kustomization has", what, limits.Files)
		}
		rel, err := inside(h.Name)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if rel == "." {
				continue
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if h.Size > limits.Unpacked-total {
				return fmt.Errorf("%s unpacks to more than %d bytes, more than a kustomization has", what, limits.Unpacked)
			}
			if err := writeFile(target, tr, h.Size); err != nil {
				return fmt.Errorf("%s: %s: %w", what, rel, err)
			}
			total += h.Size
		case tar.TypeSymlink, tar.TypeLink:
			return fmt.Errorf("%s: %s is a link (to %q), which toa-apply does not unpack: a kustomization is files", what, rel, h.Linkname)
		default:
			return fmt.Errorf("%s: %s is not a file or a folder (tar type %q), which toa-apply does not unpack", what, rel, h.Typeflag)
		}
	}
	return nil
}

// inside cleans an entry's name and refuses one that leads outside the folder.
func inside(name string) (string, error) {
	if strings.Contains(name, "\\") || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("the entry %q has a backslash or a NUL in its name", name)
	}
	clean := path.Clean(name)
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("the entry %q leads outside the folder it is unpacked into", name)
	}
	return clean, nil
}

// writeFile writes size bytes of r to a new file: one that exists (a second entry of the same
// name) is refused rather than replaced. Its folder is made; no folder on the way is a link,
// since Unpack makes only folders and files.
func writeFile(file string, r io.Reader, size int64) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("the tar ends after %d of its %d bytes", n, size)
	}
	return err
}
