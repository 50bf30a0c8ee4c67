package harness

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// RunnerBaseRef is where PushRunnerBase pushes the base whose platform, libc and Node major are
// the runner's, under the registry's address.
const RunnerBaseRef = "bases/runner-node:test"

// PushRunnerBase pushes, as <addr>/bases/runner-node:test, a linux/amd64 base that is this
// runner's own platform, libc and Node major: the amd64 Debian base (a shell, python3, make, g++)
// with the runner's node, its headers and its npm laid over it in /usr/local, as the node images
// have them. A build for it is the most common one (a Debian node base on an amd64 runner): the
// target is the runner. It returns the reference. Skipped where the runner is not linux/amd64 or
// the Debian base has not been made.
func PushRunnerBase(t testing.TB, addr string) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the runner's base is made for linux/amd64 runners")
	}
	file := debianbase.File("amd64")
	if _, err := os.Stat(file); err != nil {
		t.Skipf("no Debian base for amd64 at %s: run bash testdata/qemu/install.sh (make setup does)", file)
	}
	version, layerFile := runnerNodeLayer(t)
	layers := []string{file, layerFile}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	for _, f := range layers {
		gz, err := gzipOnce(f)
		if err != nil {
			t.Fatalf("compress %s: %v", f, err)
		}
		l, err := tarball.LayerFromFile(gz, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "harness: " + filepath.Base(f)}}); err != nil {
			t.Fatal(err)
		}
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_VERSION=" + version}
	cfg.Config.Cmd = []string{"node"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	ref := addr + "/" + RunnerBaseRef
	if err := remote.WriteIndex(baseRef(t, ref), idx, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the runner's base %s: %v", ref, err)
	}
	return ref
}

// runnerNodeLayer is the tar of the runner's node (its binary, its headers, its npm) under
// usr/local, made once per node version beside the Debian bases.
func runnerNodeLayer(t testing.TB) (version, file string) {
	t.Helper()
	out, err := exec.Command("node", "-p", "process.version.slice(1) + ' ' + process.execPath").Output()
	if err != nil {
		t.Skipf("no node on PATH: %v", err)
	}
	version, execPath, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	prefix := filepath.Dir(filepath.Dir(execPath))
	npm := filepath.Join(prefix, "lib", "node_modules", "npm")
	headers := filepath.Join(prefix, "include", "node")
	for _, need := range []string{npm, filepath.Join(headers, "node.h")} {
		if _, err := os.Stat(need); err != nil {
			t.Skipf("the runner's node has no %s to lay into a base", need)
		}
	}
	// ".2": the layer whose npm and headers folders are opaque (the name of the one before
	// stays another's, which other worktrees may still read)
	file = filepath.Join(debianbase.Dir(), "runner-node-"+version+".2.tar")
	if info, err := os.Stat(file); err == nil && info.Size() > 0 {
		return version, file
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".runner-node-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	for _, dir := range []string{"usr", "usr/local", "usr/local/bin", "usr/local/lib", "usr/local/lib/node_modules", "usr/local/include"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	if err := addFile(tw, execPath, "usr/local/bin/node"); err != nil {
		t.Fatal(err)
	}
	for _, tree := range [][2]string{{npm, "usr/local/lib/node_modules/npm"}, {headers, "usr/local/include/node"}} {
		if err := addTree(tw, tree[0], tree[1]); err != nil {
			t.Fatal(err)
		}
		// opaque: the Debian base's npm 10 (and any headers) gone, not mixed with the runner's:
		// npm 11's files over npm 10's left npm 10's nested packages first on npm 11's require
		// path, and npm ci failed there ("Class extends value undefined", minipass-flush)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: tree[1] + "/.wh..wh..opq", Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"npm": "../lib/node_modules/npm/bin/npm-cli.js", "npx": "../lib/node_modules/npm/bin/npx-cli.js"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "usr/local/bin/" + name, Linkname: target, Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		t.Fatal(err)
	}
	return version, file
}

// addTree writes the files, folders and links under dir into tw at name.
func addTree(tw *tar.Writer, dir, name string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		to := filepath.ToSlash(filepath.Join(name, rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: to + "/", Mode: 0o755})
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: to, Linkname: link, Mode: 0o777})
		case info.Mode().IsRegular():
			return addFile(tw, p, to)
		}
		return nil
	})
}

func addFile(tw *tar.Writer, from, name string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if info.Mode()&0o111 != 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: info.Size()}); err != nil {
		return err
	}
	if n, err := io.Copy(tw, f); err != nil || n != info.Size() {
		return fmt.Errorf("copy %s: %d of %d bytes: %v", from, n, info.Size(), err)
	}
	return nil
}
