//go:build !linux

package layer

import "io/fs"

// keepsTrees: no change times here to tell a kept tree that was touched; no tree is kept.
const keepsTrees = false

// changeStamp is unknown here: no kept tree is trusted, every install is npm ci's.
func changeStamp(fs.FileInfo) (string, bool) { return "", false }
