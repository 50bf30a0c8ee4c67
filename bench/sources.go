package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/layer"
)

// Item 2: the sources layer of a large component against `tar -c | gzip -6` of the same tree.

// sourceTree is a large component made of copies of npm's own package (JavaScript, JSON,
// Markdown: what a component's sources are made of), kept under $TOA_CACHE/bench/tree.
func (b *bench) sourceTree() (string, error) {
	dir := filepath.Join(filepath.Dir(b.work), "tree")
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	os.RemoveAll(dir)
	root, err := exec.Command("npm", "root", "-g").Output()
	if err != nil {
		return "", fmt.Errorf("npm root -g: %w", err)
	}
	npm := filepath.Join(strings.TrimSpace(string(root)), "npm")
	for i := 1; i <= 8; i++ {
		if err := copyTree(npm, filepath.Join(dir, fmt.Sprintf("copy%d", i)), nil); err != nil {
			return "", err
		}
	}
	// copyTree leaves node_modules out, which is most of npm: take it as plain sources
	for i := 1; i <= 8; i++ {
		cmd := exec.Command("cp", "-a", filepath.Join(npm, "node_modules"), filepath.Join(dir, fmt.Sprintf("copy%d", i), "lib-vendored"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("cp: %v: %s", err, out)
		}
	}
	return dir, os.WriteFile(done, nil, 0o644)
}

func (b *bench) sourcesLayer() error {
	tree, err := b.sourceTree()
	if err != nil {
		return err
	}
	out, err := exec.Command("bash", "-c", fmt.Sprintf("tar -cf - -C %q . | wc -c; find %q -type f | wc -l", tree, tree)).Output()
	if err != nil {
		return err
	}
	var tarBytes, files int64
	fmt.Sscan(string(out), &tarBytes, &files)
	c := &toa.Component{Path: tree, Locator: toa.NewLocator("bench", "default"), PackageJSON: filepath.Join(tree, "package.json")}
	dir := filepath.Join(b.work, "sources")
	os.MkdirAll(dir, 0o755)
	var toaS, tarS series
	var toaSize, tarSize int64
	for run := 1; run <= b.runs; run++ {
		order := []string{"toa", "tar"}
		if run%2 == 0 {
			order = []string{"tar", "toa"}
		}
		for _, tool := range order {
			cache := filepath.Join(dir, fmt.Sprintf("%s-%d", tool, run))
			os.MkdirAll(cache, 0o755)
			start := time.Now()
			switch tool {
			case "toa":
				l, err := layer.Sources(c, layer.WithCacheDir(cache))
				if err != nil {
					return err
				}
				if _, err := l.Digest(); err != nil {
					return err
				}
				toaS = append(toaS, sample{wall: time.Since(start)})
				toaSize, _ = l.Size()
			case "tar":
				file := filepath.Join(cache, "tree.tar.gz")
				cmd := exec.Command("bash", "-c", fmt.Sprintf("tar -cf - -C %q . | gzip -6 > %q", tree, file))
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("tar | gzip: %v: %s", err, out)
				}
				tarS = append(tarS, sample{wall: time.Since(start)})
				if info, err := os.Stat(file); err == nil {
					tarSize = info.Size()
				}
			}
			os.RemoveAll(cache)
		}
	}
	mbs := func(s series) float64 { return float64(tarBytes) / 1e6 / s.wall() }
	fmt.Printf("\n### 2. Sources layer of a large component\n\n")
	fmt.Printf("A component of %d files, %s as a tar stream (8 copies of npm's own package tree, in the page cache), written as a sources layer "+
		"by the layer package (klauspost/compress gzip, level %d, one pass: tar, both digests, the file in the cache, fsync) against "+
		"`tar -cf - -C TREE . | gzip -6 > FILE` (GNU tar and gzip, level 6). MB/s of the tar stream; median of %d runs, alternating.\n\n",
		files, size(float64(tarBytes)), layer.CompressionLevel, b.runs)
	fmt.Println("| writer | time | MB/s | compressed | ratio to tar \\| gzip -6 |")
	fmt.Println("|---|---:|---:|---:|---:|")
	fmt.Printf("| toa-push sources layer (gzip level %d) | %s | %.0f | %s | %.1f× faster |\n", layer.CompressionLevel, secs(toaS.wall()), mbs(toaS), size(float64(toaSize)), tarS.wall()/toaS.wall())
	fmt.Printf("| tar \\| gzip -6 | %s | %.0f | %s | 1.0× |\n", secs(tarS.wall()), mbs(tarS), size(float64(tarSize)))
	fmt.Printf("\n- Sources layer at least as fast as `tar | gzip` at the same level: %.1f× (target ≥ 1×): %s.\n", tarS.wall()/toaS.wall(), verdict(toaS.wall() <= tarS.wall()))
	return nil
}
