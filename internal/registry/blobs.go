package registry

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// blobIndex is what a run knows of one registry's blobs: which repositories hold them, learnt
// from what it read and wrote (certain), and remembered from earlier runs (a guess that a mount
// checks). It also makes sure a blob is sent to the registry once: while one repository
// receives it, the others wait and then mount it from there.
type blobIndex struct {
	mu         sync.Mutex
	held       map[string]map[string]bool // digest → repositories this run knows hold it
	remembered map[string]string          // digest → a repository an earlier run wrote it to
	flights    map[string]*flight         // digest, or repository@digest → its transfer under way
	file       string                     // where what is written is remembered; "" for nowhere
}

type flight struct {
	done chan struct{}
	err  error
}

// memoryLimit is how many blobs a registry's memory file keeps; past twice as many lines it is
// rewritten with the newest.
const memoryLimit = 20000

func newBlobIndex() *blobIndex {
	return &blobIndex{held: map[string]map[string]bool{}, remembered: map[string]string{}, flights: map[string]*flight{}}
}

// loadBlobIndex reads what earlier runs remembered of host's blobs from dir, if dir is set.
func loadBlobIndex(dir, host string) *blobIndex {
	b := newBlobIndex()
	if dir == "" {
		return b
	}
	b.file = fsys.Registries.Path(dir, strings.NewReplacer(":", "_", "/", "_").Replace(host)+".blobs")
	f, err := fsys.Open(b.file, fsys.Registries.Bound()) // a pipe or a device there is nothing remembered
	if err != nil {
		return b // nothing remembered yet
	}
	defer f.Close()
	fsys.Touch(b.file)
	var order []string
	lines := 0
	s := bufio.NewScanner(io.LimitReader(f, fsys.Registries.Bound()))
	for s.Scan() {
		digest, repo, ok := strings.Cut(s.Text(), " ")
		if !ok || !strings.HasPrefix(digest, "sha256:") || len(digest) != 71 || repo == "" {
			continue // a line cut short by a run that stopped: skip it
		}
		lines++
		if _, seen := b.remembered[digest]; !seen {
			order = append(order, digest)
		}
		b.remembered[digest] = repo
	}
	if lines > 2*memoryLimit {
		b.compact(order)
	}
	return b
}

// compact rewrites the memory file with the newest memoryLimit blobs, through a temporary file.
func (b *blobIndex) compact(order []string) {
	if len(order) > memoryLimit {
		for _, d := range order[:len(order)-memoryLimit] {
			delete(b.remembered, d)
		}
		order = order[len(order)-memoryLimit:]
	}
	var sb strings.Builder
	for _, d := range order {
		sb.WriteString(d + " " + b.remembered[d] + "\n")
	}
	_ = fsys.WriteFile(b.file, []byte(sb.String()), 0o644) // a cache: losing it costs a mount attempt
}

// has says whether the run knows repo holds digest.
func (b *blobIndex) has(digest, repo string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[digest][repo]
}

// source returns another repository that holds digest, and whether that is known in this run
// (certain) or only remembered from an earlier one.
func (b *blobIndex) source(digest, repo string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for other := range b.held[digest] {
		if other != repo {
			return other, true
		}
	}
	if other := b.remembered[digest]; other != "" && other != repo {
		return other, false
	}
	return "", false
}

// add records that repo holds digest; remember also writes it down for later runs, for the blobs
// this run sent or mounted (not those it only saw).
func (b *blobIndex) add(digest, repo string, remember bool) {
	b.mu.Lock()
	if b.held[digest] == nil {
		b.held[digest] = map[string]bool{}
	}
	b.held[digest][repo] = true
	known := b.remembered[digest] == repo
	if remember {
		b.remembered[digest] = repo
	}
	b.mu.Unlock()
	if remember && !known && b.file != "" {
		b.write(digest + " " + repo + "\n")
	}
}

// forget drops what an earlier run remembered of digest: a mount from there did not find it.
func (b *blobIndex) forget(digest string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.remembered, digest)
}

// write appends one line to the memory file. A memory is a cache: failing to write it costs a
// later run an upload, never a wrong image (a mount of a blob that is not there is refused).
func (b *blobIndex) write(line string) {
	if err := os.MkdirAll(filepath.Dir(b.file), 0o755); err != nil {
		return
	}
	// O_NONBLOCK: a named pipe there fails the open instead of waiting for a reader
	f, err := os.OpenFile(b.file, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return
	}
	f.WriteString(line) // one short write with O_APPEND: lines of concurrent runs do not mix
	f.Close()
}

// takeOff starts the transfer named key (a digest, or repository@digest), or returns the one
// under way: owner is true for the caller that must make it and then land it.
func (b *blobIndex) takeOff(key string) (f *flight, owner bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.flights[key]; f != nil {
		return f, false
	}
	f = &flight{done: make(chan struct{})}
	b.flights[key] = f
	return f, true
}

// land ends the transfer named key, with its outcome for those who waited.
func (b *blobIndex) land(key string, f *flight, err error) {
	b.mu.Lock()
	delete(b.flights, key)
	b.mu.Unlock()
	f.err = err
	close(f.done)
}

// wait waits for another caller's upload to land.
func (f *flight) wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
