package layer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// The incremental install of a changed lockfile. The last node_modules a component's install
// made is kept in the cache (fsys.Trees) under the install's key without the package.json and
// the lockfile (keyHash.withoutContent): the same component, platform, runner, npm, base and
// configuration. When the lockfile changes, that tree is taken out of the cache, `npm install
// --no-save` reifies only what the lockfile changed over it, and the result is checked against
// the lockfile before any layer is written from it; on any doubt the install is `npm ci` from
// an empty folder, as without a kept tree. See DESIGN.md, "Incremental installs".

// treeSpec is what an install that may start from a kept tree needs: the packages of the
// lockfile it installs.
type treeSpec struct {
	locked lockfile.Packages
}

// keptTree is a tree taken out of the cache for this install: the packages its hidden lockfile
// named before npm ran over it.
type keptTree struct {
	before lockfile.Packages
	// scripted are the install paths ("a/node_modules/b") of its packages with install scripts,
	// which ran when it was installed: what they did stays in the tree
	scripted map[string]bool
}

// treeRecord is what a kept tree's folder holds besides node_modules: a digest of the tree as
// it was kept (treeDigest), so that a tree whose files were touched since is not trusted.
type treeRecord struct {
	Digest string `json:"digest"`
}

const treeRecordName = "tree.json"

// takeTree moves the tree kept under key into modules, when there is one and it is as it was
// kept. A tree another run holds (already renamed away) or one that changed is no tree: the
// install is then npm ci's. modules must not exist; its parent must.
func (o *options) takeTree(key, staging, modules string) *keptTree {
	entry := fsys.Trees.Path(o.cacheRoot, key)
	held := filepath.Join(staging, "kept-tree")
	if err := os.Rename(entry, held); err != nil {
		return nil // none kept, or another run took it first: rename is the lock
	}
	data, ok := fsys.Trees.Read(filepath.Join(held, treeRecordName))
	var r treeRecord
	if !ok || json.Unmarshal(data, &r) != nil {
		fsys.RemoveAll(held)
		return nil
	}
	kept := filepath.Join(held, "node_modules")
	if digest, _, err := treeDigest(kept); err != nil || digest != r.Digest {
		fsys.RemoveAll(held)
		o.warn(fmt.Sprintf("the node_modules kept in the cache %s changed since it was kept: it is not used, and npm installs anew", fsys.Trees.Dir(o.cacheRoot)))
		return nil
	}
	before, err := lockfile.Read(lockfile.HiddenIn(kept))
	if err != nil {
		fsys.RemoveAll(held)
		return nil
	}
	if err := os.Rename(kept, modules); err != nil {
		fsys.RemoveAll(held)
		return nil
	}
	fsys.RemoveAll(held)
	scripted := map[string]bool{}
	pkgs, err := findScripts(modules)
	if err != nil {
		fsys.RemoveAll(modules)
		return nil
	}
	for _, p := range pkgs {
		scripted[p.Path] = true
	}
	return &keptTree{before: before, scripted: scripted}
}

// keepTree puts the tree at modules back in the cache under key, whole or not at all: it is
// moved into a folder beside its record and that folder renamed into place. A tree another run
// kept meanwhile under the same key stays; this one goes with the staging folder.
func (o *options) keepTree(key, staging, modules string) error {
	if !fileExists(modules) {
		return nil
	}
	digest, size, err := treeDigest(modules)
	if err != nil {
		return err
	}
	dir := fsys.Trees.Dir(o.cacheRoot)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	folder := filepath.Join(staging, "keep-tree")
	if err := os.Mkdir(folder, 0o755); err != nil {
		return err
	}
	if err := os.Rename(modules, filepath.Join(folder, "node_modules")); err != nil {
		return err
	}
	data, _ := json.Marshal(treeRecord{Digest: digest})
	if err := os.WriteFile(filepath.Join(folder, treeRecordName), data, 0o644); err != nil {
		return err
	}
	// what the cache's bound counts, without walking the tree at every run's end
	if err := os.WriteFile(filepath.Join(folder, fsys.FolderSizeFile), []byte(strconv.FormatInt(size, 10)), 0o644); err != nil {
		return err
	}
	entry := fsys.Trees.Path(o.cacheRoot, key)
	if err := os.Rename(folder, entry); err != nil && !fileExists(entry) {
		return err
	}
	return nil
}

// installOver runs npm over a kept tree in modules and checks the result (checkTree). It
// returns the install paths ("a/node_modules/b", relative to modules) of the packages npm added
// or changed, and npm's output; ok is false when the tree cannot be trusted, and modules is then
// removed for npm ci. Why `npm install --no-save`: npm ci removes node_modules before it
// installs; npm install compares the tree on the disk with the lockfile's and reifies only the
// difference, and --no-save keeps it from writing package.json or the lockfile.
func (o *options) installOver(ctx context.Context, kept *keptTree, spec *treeSpec, dir, modules string, args []string) (changed map[string]bool, out string, ok bool) {
	incremental := append([]string{"install", "--no-save"}, args[1:]...)
	out, err := o.runNpm(ctx, dir, incremental...)
	if err == nil {
		changed, err = checkTree(modules, spec.locked, kept.before)
	}
	if err == nil {
		err = kept.scriptsStay(modules, changed)
	}
	if err != nil {
		if ctx.Err() == nil {
			fsys.RemoveAll(modules)
		}
		return nil, out, false
	}
	return changed, out, true
}

// scriptsStay fails when npm removed or changed a package of the kept tree whose install scripts
// ran: what a script did outside its own folder (to a sibling, to node_modules/.bin) stays in the
// tree after its package is gone or replaced, where npm ci would start from nothing. The install
// is then npm ci's.
func (k *keptTree) scriptsStay(modules string, changed map[string]bool) error {
	for p := range k.scripted {
		if changed[p] {
			return fmt.Errorf("%s, whose install scripts ran in the kept tree, changed", p)
		}
		if !fileExists(filepath.Join(modules, filepath.FromSlash(p), "package.json")) {
			return fmt.Errorf("%s, whose install scripts ran in the kept tree, was removed", p)
		}
	}
	return nil
}

// installableOver reports whether a lockfile may be installed over a kept tree: one of version 2
// or 3 (nil: none, or one npm cannot read) whose packages all come from a registry or a URL.
// Local packages (`file:` folders, workspaces) are installed as copies (--install-links), which
// npm's hidden lockfile names otherwise than the lockfile: their installs are always npm ci's.
func installableOver(locked lockfile.Packages) bool {
	if locked == nil {
		return false
	}
	for _, p := range locked {
		if p.Local() {
			return false
		}
	}
	return true
}

// checkTree checks that modules, as npm left it over a kept tree, is what npm ci would install
// from the lockfile: its hidden lockfile names every package the lockfile installs (not dev, not
// an optional one npm left out for the platform) at the lockfile's version, resolved and
// integrity, and nothing else; the disk holds exactly the packages the hidden lockfile names;
// every .bin link leads to a file. Folders npm emptied and left (a nested node_modules, .bin, a
// scope) are removed first, as npm ci makes none. It returns the packages added or changed.
func checkTree(modules string, want, before lockfile.Packages) (map[string]bool, error) {
	got, err := lockfile.Read(lockfile.HiddenIn(modules))
	if err != nil {
		return nil, fmt.Errorf("read npm's hidden lockfile: %w", err)
	}
	for p, g := range got {
		w, ok := want[p]
		if !ok || !w.SameInstall(g) {
			return nil, fmt.Errorf("%s is %s in node_modules, %s in the lockfile", p, g.Version, w.Version)
		}
	}
	for p, w := range want {
		if _, ok := got[p]; !ok && w.Installed() && !w.Dev && !w.Optional && !w.DevOptional {
			return nil, fmt.Errorf("%s is missing from node_modules", p)
		}
	}
	if err := removeEmptyFolders(modules); err != nil {
		return nil, err
	}
	onDisk := map[string]bool{}
	err = walkPackages(modules, "", func(_, rel string, _ packageJSON, _ bool) { onDisk["node_modules/"+rel] = true })
	if err != nil {
		return nil, err
	}
	for p := range onDisk {
		if _, ok := got[p]; !ok {
			return nil, fmt.Errorf("%s is in node_modules and not in npm's hidden lockfile", p)
		}
	}
	for p, g := range got {
		if !onDisk[p] && !g.Link {
			return nil, fmt.Errorf("%s is in npm's hidden lockfile and not in node_modules", p)
		}
	}
	if err := checkBinLinks(modules); err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	for p, g := range got {
		if b, ok := before[p]; !ok || !b.SameInstall(g) {
			changed[strings.TrimPrefix(p, "node_modules/")] = true
		}
	}
	return changed, nil
}

// removeEmptyFolders removes, under every node_modules of the tree, the .bin folders, scopes
// and nested node_modules that npm emptied when it removed what was in them.
func removeEmptyFolders(modules string) error {
	return filepath.WalkDir(modules, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == modules {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		name, parent := d.Name(), filepath.Base(filepath.Dir(p))
		structural := parent == "node_modules" && (name == ".bin" || strings.HasPrefix(name, "@")) ||
			name == "node_modules" && isPackageDir(filepath.Dir(p))
		if !structural {
			return nil
		}
		if entries, err := os.ReadDir(p); err == nil && len(entries) == 0 {
			if err := os.Remove(p); err != nil {
				return err
			}
			// the parent (a nested node_modules holding only this scope) may be empty now
			if parent == "node_modules" && filepath.Dir(p) != modules {
				if rest, err := os.ReadDir(filepath.Dir(p)); err == nil && len(rest) == 0 {
					os.Remove(filepath.Dir(p))
				}
			}
			return filepath.SkipDir
		}
		return nil
	})
}

// isPackageDir reports whether dir is a package's folder: node_modules/<name> or
// node_modules/@scope/<name>.
func isPackageDir(dir string) bool {
	parent := filepath.Dir(dir)
	return filepath.Base(parent) == "node_modules" ||
		strings.HasPrefix(filepath.Base(parent), "@") && filepath.Base(filepath.Dir(parent)) == "node_modules"
}

// checkBinLinks checks that every link of every .bin folder leads to a file of the tree.
func checkBinLinks(modules string) error {
	return filepath.WalkDir(modules, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 || filepath.Base(filepath.Dir(p)) != ".bin" {
			return err
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("the link %s leads nowhere: %w", p, err)
		}
		return nil
	})
}

// treeDigest is a sha256 of every entry of the tree under dir (the folder itself left out): its
// path, type and mode, size, link target, modification and change times and inode. A file
// written, replaced, renamed or changed in its mode since gets another change time, which no
// program can set back, so a tree touched since it was kept has another digest; its contents
// are not read, so that the check costs a walk, not a read of every byte. size is the bytes of
// its regular files.
func treeDigest(dir string) (digest string, size int64, err error) {
	h := sha256.New()
	var buf bytes.Buffer
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			size += info.Size()
		}
		rel, _ := filepath.Rel(dir, p)
		buf.Reset()
		fmt.Fprintf(&buf, "%s\x00%o\x00%d\x00%d\x00", filepath.ToSlash(rel), info.Mode(), info.Size(), info.ModTime().UnixNano())
		stamp, ok := changeStamp(info)
		if !ok {
			return errors.New("no change times on this system")
		}
		buf.WriteString(stamp)
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			buf.WriteString(target)
		}
		buf.WriteByte('\n')
		h.Write(buf.Bytes())
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), size, nil
}

// onlyPaths is the filter of the packages whose install scripts run: all of them for a tree
// installed anew (nil), those npm added or changed over a kept one.
func onlyPaths(changed map[string]bool) func(rel string) bool {
	if changed == nil {
		return nil
	}
	return func(rel string) bool { return changed[rel] }
}

// scriptsRanBefore reports whether a kept tree holds packages with install scripts that npm did
// not change: their scripts ran in the base when the tree was installed (its key names the
// base), so their native code was built there and stays.
func scriptsRanBefore(modules string, changed map[string]bool) (bool, error) {
	pkgs, err := findScripts(modules)
	if err != nil {
		return false, err
	}
	for _, p := range pkgs {
		if !changed[p.Path] {
			return true, nil
		}
	}
	return false, nil
}

// onlyThese keeps the packages only keeps, all of them when it is nil.
func onlyThese(pkgs []scriptPackage, only func(rel string) bool) []scriptPackage {
	if only == nil {
		return pkgs
	}
	var kept []scriptPackage
	for _, p := range pkgs {
		if only(p.Path) {
			kept = append(kept, p)
		}
	}
	return kept
}

// hasScripts reports whether a lockfile may install a package with install scripts: one it says
// has them (hasInstallScript, which npm also sets for a binding.gyp), or one whose scripts it
// cannot know (a local folder, a link, a git repository). Not for dev packages, which the install
// leaves out. No lockfile, or one npm cannot read (nil), may.
func hasScripts(locked lockfile.Packages) bool {
	if locked == nil {
		return true
	}
	for _, p := range locked {
		if !p.Dev && (p.HasInstallScript || p.Local() || p.FromGit()) {
			return true
		}
	}
	return false
}
