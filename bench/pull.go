package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
)

// Item 9 (issue 24): what the layering costs a node. bench/apps/market is pushed for linux/amd64
// by toa-push (node_modules split in buckets: about 25 layers an image) and, where
// $BENCH_TOA_PUSH_BEFORE names one, by an earlier toa-push (one layer per component's
// node_modules: 6 an image); then a real puller, skopeo, copies the five images as a node would
// fetch them: cold (an empty OCI layout), and after the bump of item 7 (ms 2.1.2 → 2.1.3 in
// market.orders) into a layout that holds the previous push's images, where skopeo fetches only
// the blobs the layout lacks. Time, requests and bytes received; medians of b.runs runs.

// pullScenario is one measured pull: which push's images, into what.
type pullScenario struct{ key, title string }

var pullScenarios = []pullScenario{
	{"cold", "cold (empty layout)"},
	{"bump", "after the bump (layout holds the previous images)"},
}

type pullRow struct {
	layers int // most layers of an image
	pulls  map[string]series
}

func (b *bench) pulls() error {
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		return fmt.Errorf("item 9 pulls with skopeo: %w (testdata/readers/install.sh installs it)", err)
	}
	base := b.debian
	if base == "" {
		if base, err = pushThreePlatformBase(b.addr); err != nil {
			return err
		}
	}
	tools := []struct{ name, bin string }{{"toa-push", b.toaPush}}
	if before := os.Getenv("BENCH_TOA_PUSH_BEFORE"); before != "" {
		tools = append(tools, struct{ name, bin string }{"toa-push before", before})
	}
	rows := map[string]pullRow{}
	for i, tool := range tools {
		row, err := b.pullsOf(fmt.Sprintf("pull%d", i), tool.bin, base, skopeo)
		if err != nil {
			return fmt.Errorf("%s: %w", tool.name, err)
		}
		rows[tool.name] = row
	}
	fmt.Printf("\n### 9. Pull time: bench/apps/market's five images for linux/amd64, pulled by skopeo\n\n")
	fmt.Printf("bench/pull.go pushes bench/apps/market for linux/amd64 (default attachments), then `skopeo copy docker://… oci:DIR:NAME` "+
		"copies its five images one after the other, as a node fetches them: _cold_ into an empty layout; _after the bump_ "+
		"(ms 2.1.2 → 2.1.3 in market.orders, pushed again) into a copy of the cold layout, where skopeo fetches only the blobs "+
		"it lacks. _Layers_ is the most of any image, base included. Received is the registry's response bodies. Medians of %d runs, under `nice`.\n\n", b.runs)
	fmt.Println("| toa-push | layers per image | pull | wall (min–max) | requests | received |")
	fmt.Println("|---|---:|---|---:|---:|---:|")
	for _, tool := range tools {
		r := rows[tool.name]
		for _, sc := range pullScenarios {
			s := r.pulls[sc.key]
			fmt.Printf("| %s | %d | %s | %s (%s–%s) | %.0f | %s |\n", tool.name, r.layers, sc.title, secs(s.wall()),
				secs(s.minWall()), secs(s.maxWall()), s.requests(), size(s.received()))
		}
	}
	if old, ok := rows["toa-push before"]; ok {
		now := rows["toa-push"]
		for _, sc := range pullScenarios {
			n, o := now.pulls[sc.key], old.pulls[sc.key]
			fmt.Printf("- %s: %s the wall time, %s the requests and %.1f%% of the bytes of one layer per component.\n", sc.title,
				ratio(n.wall(), o.wall()), ratio(n.requests(), o.requests()), 100*n.received()/o.received())
		}
	}
	return nil
}

// pullsOf pushes the market application with the toa-push at bin in a folder of its own (ns),
// and measures the pulls of its images, cold and after the bump.
func (b *bench) pullsOf(ns, bin, base, skopeo string) (pullRow, error) {
	row := pullRow{pulls: map[string]series{}}
	app := filepath.Join(b.work, ns, "app")
	cache, work := filepath.Join(b.work, ns, "cache"), filepath.Join(b.work, ns, "work")
	err := copyTree(filepath.Join(b.repo, "bench", "apps", "market"), app, map[string]func([]byte) []byte{
		"context.toa.yaml": func(data []byte) []byte { return b.context(data, ns, []string{"linux/amd64"}, base) },
	})
	if err != nil {
		return row, err
	}
	if err := b.linkExtensions(app); err != nil {
		return row, err
	}
	for _, d := range []string{cache, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return row, err
		}
	}
	if err := os.Symlink(b.npmCache, filepath.Join(cache, "npm")); err != nil { // npm's cache warm, as in item 7
		return row, err
	}
	push := func(key string) ([]string, error) {
		fmt.Fprintf(os.Stderr, "bench: pull, %s, push (%s)\n", ns, key)
		s, err := b.measure(app, []string{"TOA_CACHE=" + cache}, ns+"-push-"+key,
			"nice", bin, "-o", "json", "--path", app, "-k", filepath.Join(work, "deployment"))
		if err != nil {
			return nil, err
		}
		return pushedRefs(s.stdout, &row)
	}
	previous, err := push("first")
	if err != nil {
		return row, err
	}
	layout := func(run int, key string) string { return filepath.Join(b.work, ns, fmt.Sprintf("%s-%d", key, run)) }
	for run := 0; run < b.runs; run++ {
		s, err := b.pullAll(ns+"-cold", skopeo, previous, layout(run, "cold"))
		if err != nil {
			return row, err
		}
		row.pulls["cold"] = append(row.pulls["cold"], s)
	}
	if err := b.changeMarket(app, "bump"); err != nil {
		return row, err
	}
	bumped, err := push("bump")
	if err != nil {
		return row, err
	}
	for run := 0; run < b.runs; run++ {
		dir := layout(run, "bump")
		// the node holds the previous images: a copy of a cold layout, made outside the time
		if out, err := exec.CommandContext(b.ctx, "cp", "-a", layout(run, "cold"), dir).CombinedOutput(); err != nil {
			return row, fmt.Errorf("copy the previous layout: %v: %s", err, out)
		}
		s, err := b.pullAll(ns+"-bump", skopeo, bumped, dir)
		if err != nil {
			return row, err
		}
		row.pulls["bump"] = append(row.pulls["bump"], s)
	}
	return row, nil
}

// pushedRefs lists the images a push printed (-o json), and raises row.layers to the most layers
// of their linux/amd64 images.
func pushedRefs(stdout []byte, row *pullRow) ([]string, error) {
	out, err := parsePush(stdout)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, img := range out.Images {
		ref, err := name.ParseReference(img.Repository+":"+img.Tag, name.Insecure)
		if err != nil {
			return nil, err
		}
		images, err := amd64Images(ref)
		if err != nil {
			return nil, err
		}
		for _, im := range images {
			man, err := im.Manifest()
			if err != nil {
				return nil, err
			}
			row.layers = max(row.layers, len(man.Layers))
		}
		refs = append(refs, ref.String())
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("toa-push -o json lists no images: %s", stdout)
	}
	return refs, nil
}

// pullAll copies each of refs into the OCI layout dir with skopeo, one after the other, and
// sums their times and the registry's log.
func (b *bench) pullAll(logName, skopeo string, refs []string, dir string) (sample, error) {
	var total sample
	for i, ref := range refs {
		tag := fmt.Sprintf("image%d", i)
		s, err := b.measure(b.work, nil, logName, "nice", skopeo, "copy", "--quiet", "--src-tls-verify=false",
			"--override-os", "linux", "--override-arch", "amd64", "docker://"+ref, "oci:"+dir+":"+tag)
		if err != nil {
			return total, err
		}
		total.wall += s.wall
		total.requests += s.requests
		total.received += s.received
	}
	fmt.Fprintf(os.Stderr, "bench: pull, %s: %s, %d requests, %s received\n", logName, secs(total.wall.Seconds()),
		total.requests, size(float64(total.received)))
	return total, nil
}

func (s series) received() float64 {
	return s.median(func(x sample) float64 { return float64(x.received) })
}
