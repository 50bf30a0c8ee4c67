package fsys

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// PartialPrefix begins the name of every file Create makes: what a run that stopped half way
// leaves behind carries it, so that a sweep (Sweep, Prune) knows it for a leftover.
const PartialPrefix = ".partial-"

// Pending is a file being written beside the place it will take, under a name no reader looks
// for: Commit moves it into place whole, Discard removes it. A run that stops between the two
// leaves only a PartialPrefix file, never a half-written one where a reader looks.
type Pending struct {
	*os.File
	perm fs.FileMode
	done bool
}

// Create begins a file in dir (made when missing) that Commit will give perm.
func Create(dir string, perm fs.FileMode) (*Pending, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, PartialPrefix+"*")
	if err != nil {
		return nil, err
	}
	return &Pending{File: f, perm: perm}, nil
}

// Commit closes the file and renames it to path, over whatever was there: readers of path see
// the old file or the new one, whole.
func (p *Pending) Commit(path string) error {
	if p.done {
		return errors.New("fsys: Commit after Commit or Discard")
	}
	err := p.Chmod(p.perm)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p.Name(), path)
	}
	p.done = true
	if err != nil {
		os.Remove(p.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Discard closes and removes the file, unless Commit already moved it into place: deferred right
// after Create, it cleans up every way out but the one that commits.
func (p *Pending) Discard() {
	if p.done {
		return
	}
	p.done = true
	p.Close()
	os.Remove(p.Name())
}

// WriteFile writes data to path whole or not at all (Create, then Commit), making its folder.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	p, err := Create(filepath.Dir(path), perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer p.Discard()
	if _, err := p.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return p.Commit(path)
}

// ReplaceDir makes dir anew, whole or not at all: fill writes into an empty folder beside dir,
// which then takes dir's place; what dir held before is removed only once the new one is in
// place. When fill fails, or the move does, dir is as it was.
func ReplaceDir(dir string, perm fs.FileMode, fill func(tmp string) error) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	parent := filepath.Dir(abs)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(abs)+".new-")
	if err != nil {
		return err
	}
	defer RemoveAll(tmp) // gone by rename when all goes well
	if err := os.Chmod(tmp, perm); err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, abs); err == nil {
		return nil // there was no dir, or an empty one
	}
	old := tmp + ".old"
	if err := os.Rename(abs, old); err != nil {
		return fmt.Errorf("move the old %s aside: %w", abs, err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		if back := os.Rename(old, abs); back != nil {
			return fmt.Errorf("%w (and the old one is left at %s: %w)", err, old, back)
		}
		return err
	}
	return RemoveAll(old)
}
