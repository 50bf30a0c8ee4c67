package sandbox

import (
	"context"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// watched is a folder of the runner a run writes into, and where the command sees it.
type watched struct {
	Source string // on the runner
	Target string // inside the root
}

// writeWatch bounds what a run adds to the folders it writes into (the upper folder, the
// writable binds): it sums their files' sizes (what a layer holds, sparse or not) every second
// or more, and stops the run past the bound. A command can write for one interval past it: at
// the 2 GB/s a local disk takes, 2 GB; each of its files stays within RLIMIT_FSIZE meanwhile.
// The interval grows with the walk's time so that the walks cost at most a twentieth of a core.
type writeWatch struct {
	dirs     []watched
	limit    int64
	baseline int64 // the bytes there before the run
	over     atomic.Bool
}

func newWriteWatch(dirs []watched, limit int64) *writeWatch {
	w := &writeWatch{dirs: dirs, limit: limit}
	w.baseline = w.sum()
	return w
}

// sum is the bytes of the regular files under the folders, links not followed. A folder the
// walk cannot read (a command's chmod 000 as an unprivileged runner) counts nothing.
func (w *writeWatch) sum() int64 {
	var total int64
	w.walk(func(_ string, size int64) bool {
		total += size
		return true
	})
	return total
}

// walk calls visit with each regular file's path inside the root and size, until it says stop.
func (w *writeWatch) walk(visit func(inside string, size int64) bool) {
	for _, d := range w.dirs {
		stopped := false
		_ = filepath.WalkDir(d.Source, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return nil
			}
			info, err := e.Info()
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(d.Source, p)
			rel = filepath.ToSlash(rel)
			if d.Target == "/" { // the upper folder: a copy's files are under copyDir
				rel = strings.TrimPrefix(rel, copyDir+"/")
			}
			if !visit(path.Join(d.Target, rel), info.Size()) {
				stopped = true
				return filepath.SkipAll
			}
			return nil
		})
		if stopped {
			return
		}
	}
}

// watch sums the folders until ctx ends, and calls stop once past the bound.
func (w *writeWatch) watch(ctx context.Context, stop func()) {
	if len(w.dirs) == 0 {
		return
	}
	interval := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		start := time.Now()
		if w.sum()-w.baseline > w.limit {
			w.over.Store(true)
			stop()
			return
		}
		interval = max(time.Second, 20*time.Since(start))
	}
}

func (w *writeWatch) exceeded() bool { return w.over.Load() }

// fileAt is a file the run left at limit bytes or more (where RLIMIT_FSIZE stopped a write), by
// its path inside the root, or "".
func (w *writeWatch) fileAt(limit int64) string {
	found := ""
	w.walk(func(inside string, size int64) bool {
		if size >= limit {
			found = inside
			return false
		}
		return true
	})
	return found
}
