package toa

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf16"
)

// HashFiles is a component's version when its manifest declares none, as Toa 256 to 289 compute
// it: every regular file under dir but those under an entry named node_modules or .git (symbolic
// links are not followed), as slash-separated relative paths sorted as JavaScript sorts strings,
// folded as sha256(path ‖ sha256(bytes)) and cut to 8 hex digits. The same files give the same
// version in any folder on any machine; a changed byte or name gives another.
func HashFiles(dir string) (string, error) { return HashFilesIgnoring(dir, nil) }

// HashFilesIgnoring is HashFiles without the files ignore leaves out.
func HashFilesIgnoring(dir string, ignore Ignore) (string, error) {
	files, err := listFiles(dir, ignore)
	if err != nil {
		return "", err
	}
	sort.Slice(files, func(i, j int) bool { return jsLess(files[i], files[j]) })
	fold := sha256.New()
	for _, rel := range files {
		digest, err := fileDigest(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return "", err
		}
		io.WriteString(fold, rel)
		fold.Write(digest)
	}
	return hex.EncodeToString(fold.Sum(nil))[:8], nil
}

func listFiles(dir string, ignore Ignore) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir && (d.Name() == "node_modules" || d.Name() == ".git") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if path != dir && ignore.Match(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return files, nil
}

func fileDigest(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// jsLess orders strings by UTF-16 code units, as JavaScript's default sort does; it differs from
// Go's byte order only for characters beyond the Basic Multilingual Plane.
func jsLess(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}
