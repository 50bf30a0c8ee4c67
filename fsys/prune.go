package fsys

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toa-deploy/toa-deploy/fault"
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

// Entry is one entry of a cache: a file, or a folder kept whole (npm's cache).
type Entry struct {
	Cache Cache     `json:"-"`
	Path  string    `json:"path"`
	Size  int64     `json:"size"`
	Used  time.Time `json:"used"` // the newest modification time in it (Touch)
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
func Prune(ctx context.Context, root string, max int64, keep time.Time) (*PruneReport, error) {
	report := &PruneReport{Root: root, Max: max, Removed: []Entry{}}
	var entries []Entry
	for _, c := range Caches() {
		if err := ctx.Err(); err != nil {
			return report, err
		}
		found, err := c.entries(root)
		if err != nil {
			return report, fmt.Errorf("look through the cache %s: %w", c.Dir(root), err)
		}
		entries = append(entries, found...)
	}
	for _, e := range entries {
		report.Before += e.Size
	}
	report.After = report.Before
	// least recently used first; a partial leftover counts as used when it was last written
	slices.SortStableFunc(entries, func(a, b Entry) int { return a.Used.Compare(b.Used) })
	for _, e := range entries {
		partial := strings.HasPrefix(filepath.Base(e.Path), PartialPrefix) // a write under way, or a leftover
		leftover := partial && time.Since(e.Used) > leftoverAge
		removable := caches[e.Cache].prune && !partial && e.Used.Before(keep)
		if !leftover && (report.After <= max || !removable) {
			report.Kept++
			continue
		}
		if err := ctx.Err(); err != nil {
			return report, err
		}
		removed, err := removeUnheld(e.Path)
		if err != nil {
			return report, fmt.Errorf("prune the cache: %w", err)
		}
		if !removed {
			report.Kept++ // another run is using it (Holds)
			continue
		}
		report.After -= e.Size
		report.Removed = append(report.Removed, e)
	}
	return report, nil
}

// removeUnheld removes the entry at path unless it is a folder a run holds (Holds): the folder
// is locked for the removal, so that no run takes it meanwhile.
func removeUnheld(path string) (bool, error) {
	if info, err := os.Lstat(path); err == nil && info.IsDir() {
		busy, unlock, err := lockToRemove(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		defer unlock()
		if busy {
			return false, nil
		}
	}
	return true, os.RemoveAll(path)
}

// entries lists the cache's entries under root, with the leftovers of interrupted writes.
func (c Cache) entries(root string) ([]Entry, error) {
	dir := c.Dir(root)
	if c.Pattern() == "" {
		size, used, err := treeSize(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil || !caches[c].prune {
			return nil, err
		}
		return []Entry{{Cache: c, Path: dir, Size: size, Used: used}}, nil
	}
	names, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, d := range names {
		name := d.Name()
		ok, _ := filepath.Match(c.Pattern(), name)
		partial := strings.HasPrefix(name, PartialPrefix)
		if !ok && !partial {
			continue
		}
		info, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || info.IsDir() != c.folders() {
			continue // gone meanwhile, or not ours
		}
		if info.IsDir() {
			// a kept folder is made whole and renamed into place when used: its own time says when
			size, err := folderSize(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			out = append(out, Entry{Cache: c, Path: filepath.Join(dir, name), Size: size, Used: info.ModTime()})
			continue
		}
		out = append(out, Entry{Cache: c, Path: filepath.Join(dir, name), Size: info.Size(), Used: info.ModTime()})
	}
	return out, nil
}

// FolderSizeFile is the file of a folder entry (Trees) that says how many bytes the folder holds,
// in decimal, as the one who wrote the folder counted them: a run's end prunes without walking
// every file of every kept tree.
const FolderSizeFile = ".size"

// folderSize is what the folder's FolderSizeFile says, else the bytes of its files.
func folderSize(dir string) (int64, error) {
	if data, err := ReadFile(filepath.Join(dir, FolderSizeFile), 64); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && n >= 0 {
			return n, nil
		}
	}
	size, _, err := treeSize(dir)
	return size, err
}

// treeSize is the bytes of the files under dir and the newest modification time there (npm
// writes its log under its cache on every run).
func treeSize(dir string) (int64, time.Time, error) {
	var size int64
	var used time.Time
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // a file removed meanwhile
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if !info.Mode().IsRegular() {
			return nil // a folder's time changes with what is added to it, not with use
		}
		size += info.Size()
		if info.ModTime().After(used) {
			used = info.ModTime()
		}
		return nil
	})
	return size, used, err
}
