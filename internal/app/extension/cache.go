package extension

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// The cache of answers (WithCache): a run that asks what an earlier run asked, of the same
// packages, takes that run's answers and starts no node at all. What the packages answer depends
// on what they are asked (the components' manifests, the annotations, which the requests hold)
// and on their code: the folders of every package a run's answers came from, and of everything
// those depend on, as node resolves them; and on what npm installed (the context's lockfiles).
// An entry is one file, named by the run's first request, holding the conversation and a
// fingerprint of each of those folders; it is taken only while every fingerprint still holds.
//
// A fingerprint is each file's path, size, modification time and mode (a package npm replaces
// by another version has another package.json; a file edited in place has another time), and
// the contents of the package.json. Nested node_modules folders are packages of their own.

const cacheVersion = 2

type cacheEntry struct {
	Version   int           `json:"version"`
	Exchanges []exchanged   `json:"exchanges"`
	Inputs    []fingerprint `json:"inputs"`
}

type fingerprint struct {
	Path string `json:"path"`
	Sum  string `json:"sum"`
}

// answers is the cache under dir, for runs of node.
type answers struct {
	dir  string
	node string
	root string // the context's folder: its lockfiles are inputs too
}

func (a *answers) file(first []byte) string {
	h := sha256.New()
	program := sha256.Sum256([]byte(program))
	fmt.Fprintf(h, "%d\x00%x\x00%s\x00", cacheVersion, program, a.node)
	h.Write(first)
	return fsys.Extensions.Path(a.dir, hex.EncodeToString(h.Sum(nil))+".json")
}

// lookup returns the conversation an earlier run began with first (masked), if every input it
// read is as it was.
func (a *answers) lookup(first []byte) []exchanged {
	path := a.file(first)
	data, ok := fsys.Extensions.Read(path) // at most maxAnswer; a pipe or a device is no entry
	if !ok {
		return nil
	}
	var e cacheEntry
	if json.Unmarshal(data, &e) != nil || e.Version != cacheVersion || len(e.Exchanges) == 0 {
		return nil
	}
	for _, in := range e.Inputs {
		if sum, err := fingerprintOf(in.Path); err != nil || sum != in.Sum {
			return nil
		}
	}
	return e.Exchanges
}

// store writes the conversation, with the fingerprints of the package folders it read and of the
// context's lockfiles. A cache that cannot be written is no error: the next run asks node again.
func (a *answers) store(conv []exchanged, dirs []string) error {
	if len(conv) == 0 {
		return nil
	}
	inputs := slices.Clone(dirs)
	for _, f := range []string{lockfile.Shrinkwrap, lockfile.PackageLock, filepath.Join("node_modules", lockfile.Hidden)} {
		inputs = append(inputs, filepath.Join(a.root, f))
	}
	e := cacheEntry{Version: cacheVersion, Exchanges: conv}
	for _, path := range inputs {
		sum, err := fingerprintOf(path)
		if err != nil {
			return fmt.Errorf("fingerprint %s: %w", path, err)
		}
		e.Inputs = append(e.Inputs, fingerprint{path, sum})
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	path := a.file(conv[0].Masked)
	return fsys.WriteFile(path, data, 0o644)
}

// fingerprintOf sums a package folder, or a file; a path that does not exist sums as "absent",
// so that its appearance is a change too.
func fingerprintOf(path string) (string, error) {
	info, err := os.Stat(path)
	if os.IsNotExist(err) {
		return "absent", nil
	}
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if !info.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		h.Write(data)
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(path, p)
		if d.IsDir() {
			if p != path && (d.Name() == "node_modules" || d.Name() == ".git") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "l %s %s\n", rel, target)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "f %s %d %d %o\n", rel, info.Size(), info.ModTime().UnixNano(), info.Mode())
		if rel == "package.json" {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(data)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
