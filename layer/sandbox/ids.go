package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultSandboxID is the host id a sandbox's root is when toa-push runs as root and
// /etc/subuid (/etc/subgid) gives root no range of its own: never 0, not an account's (useradd
// gives people ids from 1000, daemons below 1000, nobody 65534), and the first id of the ranges
// useradd hands out for rootless containers (SUB_UID_MIN), which is how an administrator reads
// it. A runner whose own user namespace does not map it (a rootless container maps 65536 ids)
// gets the highest id it maps below nobody's instead (mappedID).
const DefaultSandboxID = 100000

// IDs are the host ids the sandbox's processes and files are.
type IDs struct {
	UID, GID int
	// Root reports whether toa-push runs as root: the ids are then another's, and what the
	// sandbox writes is given to them (Own); otherwise they are the caller's own.
	Root bool
}

// SandboxIDs are the ids of this runner's sandboxes: the caller's own, or, for root, the first
// of root's subordinate ids (/etc/subuid, /etc/subgid), else DefaultSandboxID, as the runner's
// user namespace maps them. The root of a user namespace that maps no other id keeps its own.
func SandboxIDs() IDs {
	if os.Geteuid() != 0 {
		return IDs{UID: os.Geteuid(), GID: os.Getegid()}
	}
	uid, err := rootID("/etc/subuid", "/proc/self/uid_map")
	if err != nil {
		// root of a user namespace that maps it alone (unshare -r): an unprivileged id of the
		// host already, and the only one there is
		return IDs{UID: 0, GID: os.Getegid()}
	}
	gid, err := rootID("/etc/subgid", "/proc/self/gid_map")
	if err != nil {
		return IDs{UID: 0, GID: os.Getegid()}
	}
	return IDs{UID: uid, GID: gid, Root: true}
}

// rootID is root's first subordinate id in the file sub, else DefaultSandboxID, where the user
// namespace whose map is nsMap maps it; else the highest id it maps below 65534.
func rootID(sub, nsMap string) (int, error) {
	ranges := readMap(nsMap)
	if first, ok := subordinate(sub); ok && mapped(ranges, first) {
		return first, nil
	}
	return mappedID(ranges)
}

// idRange is a line of /proc/PID/uid_map: ids inside, from Inside, are Outside's.
type idRange struct{ Inside, Outside, Count int64 }

// readMap reads a uid_map or gid_map; a missing one is the initial namespace's, all ids.
func readMap(file string) []idRange {
	data, err := os.ReadFile(file)
	if err != nil {
		return []idRange{{0, 0, 1 << 32}}
	}
	var ranges []idRange
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		var r idRange
		var errs [3]error
		r.Inside, errs[0] = strconv.ParseInt(f[0], 10, 64)
		r.Outside, errs[1] = strconv.ParseInt(f[1], 10, 64)
		r.Count, errs[2] = strconv.ParseInt(f[2], 10, 64)
		if errors.Join(errs[:]...) == nil {
			ranges = append(ranges, r)
		}
	}
	return ranges
}

func mapped(ranges []idRange, id int) bool {
	for _, r := range ranges {
		if int64(id) >= r.Inside && int64(id) < r.Inside+r.Count {
			return true
		}
	}
	return false
}

// mappedID is DefaultSandboxID where the namespace maps it, else the highest id it maps below
// 65534 (nobody) other than 0.
func mappedID(ranges []idRange) (int, error) {
	if mapped(ranges, DefaultSandboxID) {
		return DefaultSandboxID, nil
	}
	best := int64(-1)
	for _, r := range ranges {
		high := min(r.Inside+r.Count-1, 65533)
		if high >= r.Inside && high > best && high != 0 {
			best = high
		}
	}
	if best <= 0 {
		return 0, fmt.Errorf("this user namespace maps no id but root's, and the sandbox never runs as root")
	}
	return int(best), nil
}

// subordinate is the first id of root's range in a subuid/subgid file ("root:100000:65536" or
// "0:100000:65536").
func subordinate(file string) (int, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	names := map[string]bool{"0": true, "root": true}
	s := bufio.NewScanner(f)
	for s.Scan() {
		parts := strings.Split(strings.TrimSpace(s.Text()), ":")
		if len(parts) != 3 || !names[parts[0]] {
			continue
		}
		first, err := strconv.Atoi(parts[1])
		count, countErr := strconv.Atoi(parts[2])
		if err == nil && countErr == nil && first > 0 && count > 0 {
			return first, true
		}
	}
	return 0, false
}

// Own gives dir and all it holds to the sandbox's ids, when toa-push runs as root (a no-op
// otherwise: the caller's files are its sandbox's already). Links are not followed; entries
// already theirs are left alone, so that their change times stay. The folder itself is given
// last, so that a tree whose top is theirs was given whole.
func (ids IDs) Own(dir string) error {
	if !ids.Root {
		return nil
	}
	var top fs.FileInfo
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if p == dir {
			top = info
			return nil
		}
		return ids.lchown(p, info)
	})
	if err != nil {
		return fmt.Errorf("give %s to the sandbox's user %d: %w", dir, ids.UID, err)
	}
	if err := ids.lchown(dir, top); err != nil {
		return fmt.Errorf("give %s to the sandbox's user %d: %w", dir, ids.UID, err)
	}
	return nil
}

// lchown gives p to ids, and gives a file back the setuid and setgid bits a change of owner
// takes from it.
func (ids IDs) lchown(p string, info fs.FileInfo) error {
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == ids.UID && int(st.Gid) == ids.GID {
		return nil
	}
	if err := os.Lchown(p, ids.UID, ids.GID); err != nil {
		return err
	}
	if mode := info.Mode(); mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 && mode&fs.ModeSymlink == 0 {
		return os.Chmod(p, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	}
	return nil
}

// owns reports whether p is the sandbox's (not followed).
func (ids IDs) owns(p string) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && int(st.Uid) == ids.UID && int(st.Gid) == ids.GID
}

// OwnUnpacked gives a base's root freshly unpacked under dir to the sandbox's ids when toa-push
// runs as root (Unpack calls it before the root enters the cache): the sandbox's root is that
// user, and overlayfs copies a file up only when its owner is mapped in the sandbox.
func OwnUnpacked(dir string) error {
	return SandboxIDs().Own(dir)
}
