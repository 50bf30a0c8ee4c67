package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Item 7 (issue 24): bench/apps/market, five components whose lockfiles pin real packages of
// the npm registry (about 280 MB of node_modules, 48 MB compressed), each its own composition, for linux/amd64:
// the first push ($BENCH_MARKET_PLATFORMS=linux/amd64,linux/arm64 for two platforms), a bump of one small package (ms 2.1.2 → 2.1.3 in market.orders), a one-line
// code change and no change, with toa-push's default attachments. For each: the time, the
// requests and bytes sent, and what a node that runs every image pulls (the layers it lacks).
// $BENCH_TOA_PUSH_BEFORE names an earlier toa-push to measure beside (one layer per
// component's node_modules); buildah runs the 289 Dockerfiles when the bench has its Debian base.

var marketScenarios = []struct{ key, title string }{
	{"first", "first push"},
	{"bump", "ms 2.1.2 → 2.1.3"},
	{"code", "one-line code change"},
	{"nochange", "no change"},
}

type marketRow struct {
	s      sample
	pulled int64
	layers int   // most layers of an image
	deps   int   // market.orders' node_modules layers
	depsSz int64 // their bytes
}

func (b *bench) market() error {
	base, platforms := b.debian, []string{"linux/amd64"}
	if p := os.Getenv("BENCH_MARKET_PLATFORMS"); p != "" {
		platforms = strings.Split(p, ",") // linux/amd64,linux/arm64: buildah's RUN for arm64 under QEMU
	}
	if base == "" {
		var err error
		if base, err = pushThreePlatformBase(b.addr); err != nil {
			return err
		}
	}
	tools := []struct{ name, bin string }{{"toa-push", b.toaPush}}
	if before := os.Getenv("BENCH_TOA_PUSH_BEFORE"); before != "" {
		tools = append(tools, struct{ name, bin string }{"toa-push before", before})
	}
	if b.peers && b.debian != "" {
		if err := b.prepareBuildah(); err != nil {
			return err
		}
		tools = append(tools, struct{ name, bin string }{"buildah", ""})
	}
	npmWarm := !emptyDir(b.npmCache)
	rows := map[string]map[string]marketRow{}
	for i, tool := range tools {
		ns := fmt.Sprintf("market%d", i)
		app := filepath.Join(b.work, ns, "app")
		cache, work := filepath.Join(b.work, ns, "cache"), filepath.Join(b.work, ns, "work")
		err := copyTree(filepath.Join(b.repo, "bench", "apps", "market"), app, map[string]func([]byte) []byte{
			"context.toa.yaml": func(data []byte) []byte { return b.context(data, ns, platforms, base) },
		})
		if err != nil {
			return err
		}
		if err := b.linkExtensions(app); err != nil {
			return err
		}
		os.MkdirAll(cache, 0o755)
		os.MkdirAll(work, 0o755)
		os.Symlink(b.npmCache, filepath.Join(cache, "npm")) // npm's cache warm, as buildah's cache mount
		rows[tool.name] = map[string]marketRow{}
		seen := map[string]bool{}
		for _, sc := range marketScenarios {
			if err := b.changeMarket(app, sc.key); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bench: market, %s, %s\n", tool.name, sc.title)
			var s sample
			if tool.bin != "" {
				s, err = b.measure(app, []string{"TOA_CACHE=" + cache}, ns+"-"+sc.key,
					"nice", tool.bin, "-o", "json", "--path", app, "-k", filepath.Join(work, "deployment"))
			} else {
				args := []string{"nice", "bash", filepath.Join(b.repo, "bench", "peer", "buildah-push.sh"), app, strings.Join(platforms, ",")}
				if sc.key == "first" {
					args = append(args, "--no-cache")
				}
				s, err = b.measure(app, []string{"BUILDAH=" + strings.Join(b.buildah, " "), "TOA_PUSH=" + b.toaPush,
					"WORK=" + filepath.Join(work, sc.key)}, ns+"-"+sc.key, args...)
			}
			if err != nil {
				return err
			}
			row, err := b.marketImages(app, seen)
			if err != nil {
				return err
			}
			row.s = s
			rows[tool.name][sc.key] = row
			// said at once too: a run stopped before the table keeps what it measured
			fmt.Fprintf(os.Stderr, "bench: market, %s, %s: %s, %d requests, %s sent, %s pulled\n", tool.name, sc.title,
				secs(s.wall.Seconds()), s.requests, size(float64(s.sent)), size(float64(row.pulled)))
		}
	}
	fmt.Printf("\n### 7. bench/apps/market: real npm packages, five components, %s\n\n", strings.Join(platforms, " + "))
	fmt.Printf("bench/market.go pushes bench/apps/market (five components, each its own composition: express, fastify, @aws-sdk/client-s3, "+
		"-dynamodb, -sqs, -sns, typescript, date-fns, rxjs, lodash, moment, pino, zod, ms...) with the layer cache cold and npm's cache %s, "+
		"then bumps ms 2.1.2 → 2.1.3 in market.orders, changes one line of its code, and pushes once more unchanged. toa-push attaches its "+
		"default SBOM and provenance. _Pulled_ is what an amd64 node that runs every image and has the previous push's layers fetches: the bytes of "+
		"the layers it lacks. _Layers_ is the most of any image, base included; _orders' node_modules_ is market.orders' layers of "+
		"node_modules and their compressed bytes. buildah (when measured) runs the 289 Dockerfiles of item 1 with its npm cache mount, "+
		"the base pulled beforehand, --no-cache on the first push. One run each.\n\n", map[bool]string{
		true:  "warm (toa-push's from an earlier bench run; buildah's cache mount is its own, and was warm only if an earlier run left it)",
		false: "cold for both (a fresh runner: the first push downloads every package from the npm registry; the later pushes find them cached)"}[npmWarm])
	fmt.Println("| tool | change | wall | requests | sent | pulled | layers | orders' node_modules |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	for _, tool := range tools {
		for _, sc := range marketScenarios {
			r := rows[tool.name][sc.key]
			fmt.Printf("| %s | %s | %s | %d | %s | %s | %d | %d, %s |\n", tool.name, sc.title, secs(r.s.wall.Seconds()), r.s.requests,
				size(float64(r.s.sent)), size(float64(r.pulled)), r.layers, r.deps, size(float64(r.depsSz)))
		}
	}
	fmt.Println()
	now := rows["toa-push"]
	if bump, deps := now["bump"].s.sent, now["first"].depsSz; deps > 0 {
		fmt.Printf("- The bump sends %.1f%% of market.orders' node_modules (target ≤ 10%%): %s.\n", 100*float64(bump)/float64(deps),
			verdict(float64(bump) <= 0.1*float64(deps)))
	}
	if code := now["code"]; code.pulled > 0 {
		// what a node pulls of a code change is its new layers: the sources layer
		extra := float64(code.s.sent-code.pulled) / 1024
		fmt.Printf("- The one-line code change sends the sources layer (%s) + %.1f KiB with the default attachments (target ≤ + 16 KiB): %s.\n",
			size(float64(code.pulled)), extra, verdict(extra <= 16))
	}
	if old, ok := rows["toa-push before"]; ok {
		fmt.Printf("- The first push sends %.3f× what it sent with one layer per component (target 1 ± 0.02): %s.\n",
			float64(now["first"].s.sent)/float64(old["first"].s.sent), verdict(abs(float64(now["first"].s.sent)/float64(old["first"].s.sent)-1) <= 0.02))
	}
	if peer, ok := rows["buildah"]; ok {
		fmt.Printf("- The bump: %.1f× faster than buildah (target ≥ 5×).\n", peer["bump"].s.wall.Seconds()/now["bump"].s.wall.Seconds())
	}
	return nil
}

// emptyDir reports whether dir has no entries (or cannot be read).
func emptyDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err != nil || len(entries) == 0
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// changeMarket makes a scenario's change in the application.
func (b *bench) changeMarket(app, scenario string) error {
	orders := filepath.Join(app, "components", "market.orders")
	switch scenario {
	case "bump":
		for _, f := range []string{"package.json", "package-lock.json"} {
			data, err := os.ReadFile(filepath.Join(b.repo, "bench", "apps", "changes", "market.orders", f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(orders, f), data, 0o644); err != nil {
				return err
			}
		}
	case "code":
		f, err := os.OpenFile(filepath.Join(orders, "operations.js"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString("// a one-line change\n")
		return err
	}
	return nil
}

// marketImages reads the application's images for linux/amd64 (the tags its kustomization pins
// are read by --plan): what a node lacks of them beside seen (which it then has), the layer counts
// and market.orders' node_modules layers.
func (b *bench) marketImages(app string, seen map[string]bool) (marketRow, error) {
	var row marketRow
	s, err := b.measure(app, nil, "market-plan", b.toaPush, "--plan", "-o", "json", "--path", app, "-k", filepath.Join(b.work, "plan"))
	if err != nil {
		return row, err
	}
	out, err := parsePush(s.stdout)
	if err != nil {
		return row, err
	}
	for _, img := range out.Images {
		ref, err := name.ParseReference(img.Repository+":"+img.Tag, name.Insecure)
		if err != nil {
			return row, err
		}
		images, err := amd64Images(ref)
		if err != nil {
			return row, err
		}
		for _, im := range images {
			man, err := im.Manifest()
			if err != nil {
				return row, err
			}
			cfg, err := im.ConfigFile()
			if err != nil {
				return row, err
			}
			row.layers = max(row.layers, len(man.Layers))
			for _, l := range man.Layers {
				if !seen[l.Digest.String()] {
					seen[l.Digest.String()] = true
					row.pulled += l.Size
				}
			}
			if !strings.HasSuffix(img.Name, "orders") {
				continue
			}
			var history []string
			for _, h := range cfg.History {
				if !h.EmptyLayer {
					history = append(history, h.CreatedBy)
				}
			}
			offset := len(man.Layers) - len(history)
			for i, h := range history {
				if strings.Contains(h, "node_modules of") && i+offset >= 0 {
					row.deps++
					row.depsSz += man.Layers[i+offset].Size
				}
			}
		}
	}
	return row, nil
}

// amd64Images reads ref's linux/amd64 image: from its index, or the image itself where ref is
// one (buildah pushes a single-platform build as an image manifest).
func amd64Images(ref name.Reference) ([]v1.Image, error) {
	desc, err := remote.Get(ref)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ref, err)
	}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		return []v1.Image{img}, err
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []v1.Image
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.Architecture != "amd64" {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}
