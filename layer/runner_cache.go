package layer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// What node says of itself depends on its binary alone: DetectRunnerCached keeps DetectRunner's
// answer in the cache, keyed by the binary's path, size, modification time and inode, so that a
// push whose dependencies are cached starts no node at all (asking costs two processes, a tenth
// of a second). npm's version is read each time: from its package.json when npm is laid out as
// usual, which starts nothing.

const runnerCacheVersion = 1

type runnerRecord struct {
	Version int    `json:"version"`
	Node    string `json:"node"` // the binary's fingerprint
	Runner  Runner `json:"runner"`
}

// DetectRunnerCached is DetectRunner, with node's part of the answer kept under dir and taken
// from there while node's binary is the same file. A cache that cannot be read or written only
// costs node being asked.
func DetectRunnerCached(ctx context.Context, dir string) (*Runner, error) {
	key, err := nodeFingerprint()
	if err != nil || dir == "" {
		return DetectRunner(ctx)
	}
	path := fsys.Runner.Path(dir, "runner.json")
	if r := readRunner(path, key); r != nil {
		npm, err := npmVersion(ctx)
		if err != nil {
			return nil, err
		}
		r.Npm = npm
		return r, nil
	}
	r, err := DetectRunner(ctx)
	if err != nil {
		return nil, err
	}
	writeRunner(path, runnerRecord{Version: runnerCacheVersion, Node: key, Runner: *r})
	return r, nil
}

// nodeFingerprint names the node binary on PATH as the file it is.
func nodeFingerprint() (string, error) {
	path, err := exec.LookPath("node")
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	info, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	var ino uint64
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%s %s %d %d %d", path, real, info.Size(), info.ModTime().UnixNano(), ino), nil
}

func readRunner(path, key string) *Runner {
	data, ok := fsys.Runner.Read(path) // a pipe or a device there is no answer, never a wait
	if !ok {
		return nil
	}
	var rec runnerRecord
	if json.Unmarshal(data, &rec) != nil || rec.Version != runnerCacheVersion || rec.Node != key || rec.Runner.Node == "" {
		return nil
	}
	return &rec.Runner
}

// writeRunner writes the record atomically; failing to is no error.
func writeRunner(path string, rec runnerRecord) {
	data, err := json.Marshal(rec)
	if err != nil {
		return
	}
	_ = fsys.WriteFile(path, data, 0o644)
}
