//go:build unix

package layer

import (
	"io/fs"
	"syscall"
)

// inode identifies the file behind info, and says how many names it has.
func inode(info fs.FileInfo) (id fileID, links uint64, ok bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, 0, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, uint64(st.Nlink), true
}
