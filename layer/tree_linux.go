//go:build linux

package layer

import (
	"fmt"
	"io/fs"
	"syscall"
)

// keepsTrees: change times tell a kept tree that was touched (tree.go).
const keepsTrees = true

// changeStamp is the file's change time, inode and link count, which treeDigest holds.
func changeStamp(info fs.FileInfo) (string, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d.%d\x00%d\x00%d\x00", st.Ctim.Sec, st.Ctim.Nsec, st.Ino, st.Nlink), true
}
