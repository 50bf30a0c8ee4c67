package fsys

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Holds are the folders of the caches a run is using (an unpacked base it runs in), each held
// with a shared advisory lock (flock) until Release, or the process's end, so that another run
// that prunes the cache meanwhile leaves them: Prune takes an exclusive lock on a folder, without
// waiting, before it removes it, and keeps the folder when it cannot. Runs that share a cache
// (CI jobs on one runner) then never remove what the other is using. A nil *Holds holds nothing.
type Holds struct {
	mu   sync.Mutex
	held map[string]*os.File
}

// NewHolds returns an empty set of holds.
func NewHolds() *Holds { return &Holds{held: map[string]*os.File{}} }

// ErrGone is Hold's when the folder is not there once locked: a prune removed it meanwhile.
var ErrGone = errors.New("removed by a prune of the cache meanwhile")

// Hold holds dir (once per folder: a second Hold of the same folder does nothing) and returns
// ErrGone when it is no longer there once held, so that the caller makes it again.
func (h *Holds) Hold(dir string) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.held[dir]; ok && sameFile(f, dir) {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrGone
		}
		return fmt.Errorf("hold %s: %w", dir, err)
	}
	if err := holdShared(f); err != nil {
		f.Close()
		return fmt.Errorf("hold %s: %w", dir, err)
	}
	if !sameFile(f, dir) {
		f.Close()
		return ErrGone
	}
	if old, ok := h.held[dir]; ok {
		old.Close()
	}
	h.held[dir] = f
	return nil
}

// Release lets go of every folder held.
func (h *Holds) Release() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for dir, f := range h.held {
		f.Close()
		delete(h.held, dir)
	}
}

// sameFile says whether the open f is still the folder at dir.
func sameFile(f *os.File, dir string) bool {
	open, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(dir)
	return err == nil && os.SameFile(open, now)
}

// lockToRemove takes the exclusive lock of the folder name in dirFd that Prune is about to
// remove, without waiting: busy when a run holds it. unlock closes it after the removal. The
// folder is opened without following a link.
func lockToRemove(dirFd int, name string) (busy bool, unlock func(), err error) {
	fd, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, func() {}, err
	}
	f := os.NewFile(uintptr(fd), name)
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return true, func() {}, nil
		}
		return false, func() {}, err
	}
	return false, func() { f.Close() }, nil
}

// holdWait bounds how long Hold waits for a prune that is removing the folder: a removal takes
// seconds; a prune that stopped let go when its process ended.
const holdWait = 2 * time.Minute

// holdShared takes f's shared lock, waiting while a prune holds the exclusive one.
func holdShared(f *os.File) error {
	deadline := time.Now().Add(holdWait)
	for {
		err := flock(f, syscall.LOCK_SH|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another run's prune of the cache has held it for %s", holdWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
