package fsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// DefaultCacheMax bounds the caches when TOA_CACHE_MAX is not set: a CI runner's disk (GitHub's
// hosted runners have some 14 GiB free) keeps room for the sources and npm's own work, and an
// application of some dozen components, each with a node_modules per platform, fits.
const DefaultCacheMax int64 = 5 << 30

// CacheMaxVariable is the environment variable that bounds the caches.
const CacheMaxVariable = "TOA_CACHE_MAX"

// leftoverAge is how long a PartialPrefix file may stay before Prune takes it for the leftover of
// a run that stopped: no write of the cache takes that long.
const leftoverAge = 24 * time.Hour

// CacheMax is TOA_CACHE_MAX (a size: 5GiB, 500MiB, 2G, 1000000 bytes), else DefaultCacheMax. A
// value that is not a size is an *fault.Input naming the variable.
func CacheMax() (int64, error) {
	value := strings.TrimSpace(os.Getenv(CacheMaxVariable))
	if value == "" {
		return DefaultCacheMax, nil
	}
	n, err := ParseSize(value)
	if err != nil {
		return 0, &fault.Input{Key: CacheMaxVariable, Message: fmt.Sprintf("is %q: %v", value, err),
			Hint: "give a size, like 5GiB, 500MiB or 0 (keep nothing)"}
	}
	return n, nil
}

// ParseSize reads a size in bytes: a whole number with an optional unit, binary (KiB, MiB, GiB,
// TiB, and K, M, G, T for the same) or decimal (KB, MB, GB, TB), B for bytes.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	number, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	n, err := strconv.ParseInt(number, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("not a size")
	}
	multiplier := map[string]int64{"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
	m, ok := multiplier[unit]
	if !ok {
		return 0, fmt.Errorf("%q is not a unit of size (B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)", s[i:])
	}
	if n > (1<<63-1)/m {
		return 0, errors.New("too large a size")
	}
	return n * m, nil
}

// Entry is one entry of a cache: a file, a folder kept whole (npm's cache, a kept tree, an
// unpacked base), or a link found where the cache has an entry or a folder (removed as a link).
type Entry struct {
	Cache Cache     `json:"-"`
	Path  string    `json:"path"`
	Size  int64     `json:"size"`
	Used  time.Time `json:"used"` // the newest modification time in it (Touch)

	folder string // where it is, relative to the root, reached without following a link
	name   string // its name there
	dir    bool   // a folder entry, locked before it is removed (Holds)
	link   bool   // a link: not the cache's, removed by every prune
}

// PruneReport is what Prune found and did.
type PruneReport struct {
	Root    string  `json:"root"`
	Max     int64   `json:"max"`
	Before  int64   `json:"before"` // bytes of every entry, before
	After   int64   `json:"after"`
	Removed []Entry `json:"removed"`
	Kept    int     `json:"kept"` // entries left
}

// Prune removes the least recently used entries of the caches under root until what is left
// holds at most max bytes, and the leftovers of runs that stopped a day ago or more. Entries used
// at or after keep (those of the run that prunes) are never removed, so a run never takes away
// what it is about to use; a cache holding more than max of them stays over the bound until the
// next run. What the root holds besides the caches of the table (the test harness's tools, the
// control plane) is never looked at.
//
// Prune never follows a link under root (root itself may be one): each folder is opened from its
// parent's descriptor without following one. toa-push makes no link where a cache has a folder or
// an entry; a link found there (whoever made it) would take the bound's writes and removals
// outside the cache, so every prune removes it, as a link, whatever the bound: what it leads to is
// never looked through nor removed.
func Prune(ctx context.Context, root string, max int64, keep time.Time) (*PruneReport, error) {
	report := &PruneReport{Root: root, Max: max, Removed: []Entry{}}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return report, nil
	}
	if err != nil {
		return report, fmt.Errorf("open the cache %s: %w", root, err)
	}
	defer unix.Close(rootFd)
	var entries []Entry
	seen := map[string]bool{} // a link in place of a folder several caches share is one entry
	for _, c := range Caches() {
		if err := ctx.Err(); err != nil {
			return report, err
		}
		found, err := c.entries(root, rootFd)
		if err != nil {
			return report, fmt.Errorf("look through the cache %s: %w", c.Dir(root), err)
		}
		for _, e := range found {
			if !seen[e.Path] {
				seen[e.Path] = true
				entries = append(entries, e)
			}
		}
	}
	for _, e := range entries {
		report.Before += e.Size
	}
	report.After = report.Before
	// least recently used first; a partial leftover counts as used when it was last written
	slices.SortStableFunc(entries, func(a, b Entry) int { return a.Used.Compare(b.Used) })
	for _, e := range entries {
		partial := strings.HasPrefix(e.name, PartialPrefix) // a write under way, or a leftover
		leftover := (partial && time.Since(e.Used) > leftoverAge) || e.link
		removable := caches[e.Cache].prune && !partial && e.Used.Before(keep)
		if !leftover && (report.After <= max || !removable) {
			report.Kept++
			continue
		}
		if err := ctx.Err(); err != nil {
			return report, err
		}
		removed, err := removeUnheld(rootFd, e)
		if err != nil {
			return report, fmt.Errorf("prune the cache: remove %s: %w", e.Path, err)
		}
		if !removed {
			report.Kept++ // another run is using it (Holds), or it is no longer where it was
			continue
		}
		report.After -= e.Size
		report.Removed = append(report.Removed, e)
	}
	return report, nil
}

// removeUnheld removes the entry e unless it is a folder a run holds (Holds): the folder is
// locked for the removal, so that no run takes it meanwhile. An entry whose folder can no longer
// be reached without a link is left.
func removeUnheld(rootFd int, e Entry) (bool, error) {
	dirFd, link, err := openFolder(rootFd, e.folder)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || link != "" {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(dirFd)
	if e.dir {
		busy, unlock, err := lockToRemove(dirFd, e.name)
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			// a link or a file in its place now: nothing a run holds, removed as it is
		case err != nil:
			return false, ignoreMissing(err)
		case busy:
			return false, nil
		default:
			defer unlock()
		}
	}
	return true, RemoveAt(dirFd, e.name)
}

// openFolder opens the folder rel (slash-separated, "" for the root) under rootFd, one name at a
// time without following a link. When a name on the way is a link, link is its path relative
// to the root and fd is -1; a name missing or not a folder is an error wrapping ENOENT or ENOTDIR.
func openFolder(rootFd int, rel string) (fd int, link string, err error) {
	fd, err = unix.Dup(rootFd)
	if err != nil || rel == "" {
		return fd, "", err
	}
	done := ""
	for _, name := range strings.Split(rel, "/") {
		done = path.Join(done, name)
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				unix.Close(fd)
				return -1, done, nil
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, "", err
		}
		fd = next
	}
	return fd, "", nil
}

// entries lists the cache's entries under root (opened as rootFd), with the leftovers of
// interrupted writes, never following a link: a link on the way to the cache's folder is the
// one entry found.
func (c Cache) entries(root string, rootFd int) ([]Entry, error) {
	if !caches[c].prune {
		return nil, nil // never pruned: not even looked at
	}
	folder, pattern := filepath.ToSlash(c.Folder()), c.Pattern()
	if pattern == "" { // the folder is the one entry
		folder, pattern = path.Dir(folder), path.Base(folder)
		if folder == "." {
			folder = ""
		}
	}
	dirFd, link, err := openFolder(rootFd, folder)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if link != "" {
		e, err := linkEntry(c, root, rootFd, link)
		if err != nil {
			return nil, ignoreMissing(err)
		}
		return []Entry{e}, nil
	}
	defer unix.Close(dirFd)
	names, err := NamesAt(dirFd)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, name := range names {
		ok, _ := filepath.Match(pattern, name)
		partial := strings.HasPrefix(name, PartialPrefix) && c.Pattern() != "" // a whole folder has none
		if !ok && !partial {
			continue
		}
		e, ok, err := c.entryAt(dirFd, folder, name)
		if err != nil {
			return nil, err
		}
		if ok {
			e.Path = filepath.Join(root, filepath.FromSlash(folder), name)
			out = append(out, e)
		}
	}
	return out, nil
}

// entryAt is the entry name in the folder dirFd (at folder under the root), and false for what
// is gone meanwhile or is not the cache's: a file where it keeps folders, a folder where it keeps
// files.
func (c Cache) entryAt(dirFd int, folder, name string) (Entry, bool, error) {
	e := Entry{Cache: c, folder: folder, name: name}
	var st unix.Stat_t
	if err := unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return e, false, nil
	}
	e.Used = mtime(&st)
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	wholeFolder := c.Pattern() == ""
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		e.link = true // of size 0: what it leads to is not the cache's
		return e, true, nil
	case wholeFolder && isDir: // npm's: its use is the newest file in it (npm's log)
		fd, err := unix.Openat(dirFd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return e, false, nil
		}
		defer unix.Close(fd)
		var used time.Time
		e.Size, used = treeSize(fd)
		e.Used, e.dir = used, true
		return e, true, nil
	case wholeFolder || isDir != c.folders():
		return e, false, nil
	case isDir:
		// a kept folder is made whole and renamed into place when used: its own time says when
		fd, err := unix.Openat(dirFd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return e, false, nil
		}
		defer unix.Close(fd)
		e.Size, e.dir = folderSize(fd), true
		return e, true, nil
	}
	e.Size = st.Size
	return e, true, nil
}

// linkEntry is the link at rel under the root, found where a cache has a folder.
func linkEntry(c Cache, root string, rootFd int, rel string) (Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(rootFd, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, err
	}
	folder := path.Dir(rel)
	if folder == "." {
		folder = ""
	}
	return Entry{Cache: c, Path: filepath.Join(root, filepath.FromSlash(rel)), Used: mtime(&st),
		folder: folder, name: path.Base(rel), link: true}, nil
}

func mtime(st *unix.Stat_t) time.Time { return time.Unix(st.Mtim.Unix()) }

// FolderSizeFile is the file of a folder entry (Trees) that says how many bytes the folder holds,
// in decimal, as the one who wrote the folder counted them: a run's end prunes without walking
// every file of every kept tree.
const FolderSizeFile = ".size"

// folderSize is what the folder fd's FolderSizeFile says, else the bytes of its files.
func folderSize(fd int) int64 {
	if f, err := unix.Openat(fd, FolderSizeFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		file := os.NewFile(uintptr(f), FolderSizeFile)
		data, err := io.ReadAll(io.LimitReader(file, 64))
		file.Close()
		if n, perr := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && perr == nil && n >= 0 {
			return n
		}
	}
	size, _ := treeSize(fd)
	return size
}

// treeSize is the bytes of the regular files under the folder fd and the newest modification
// time among them (npm writes its log under its cache on every run), never following a link.
// What cannot be read is not counted.
func treeSize(fd int) (int64, time.Time) {
	var size int64
	var used time.Time
	names, _ := NamesAt(fd)
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // removed meanwhile
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			size += st.Size
			if t := mtime(&st); t.After(used) {
				used = t
			}
		case unix.S_IFDIR: // a folder's time changes with what is added to it, not with use
			sub, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			n, t := treeSize(sub)
			unix.Close(sub)
			size += n
			if t.After(used) {
				used = t
			}
		}
	}
	return size, used
}
