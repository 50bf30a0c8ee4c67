package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

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
	{"cold", "skopeo, cold (empty layout)"},
	{"bump", "skopeo, after the bump (layout holds the previous images)"},
	{"ctr-cold", "containerd, cold (pulled and unpacked)"},
	{"ctr-bump", "containerd, after the bump (it holds the previous images)"},
}

// containerd is the node's puller, where it is installed: containerd and its ctr.
type containerd struct{ daemon, ctr string }

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
	// containerd, as a node pulls: where it and ctr are installed (testdata/controlplane/realnode/
	// install.sh) and this runs as root
	var node containerd
	if d, err := exec.LookPath("containerd"); err == nil && os.Geteuid() == 0 {
		if c, err := exec.LookPath("ctr"); err == nil {
			node = containerd{daemon: d, ctr: c}
		}
	}
	rows := map[string]pullRow{}
	for i, tool := range tools {
		row, err := b.pullsOf(fmt.Sprintf("pull%d", i), tool.bin, base, skopeo, node)
		if err != nil {
			return fmt.Errorf("%s: %w", tool.name, err)
		}
		rows[tool.name] = row
	}
	fmt.Printf("\n### 9. Pull time: bench/apps/market's five images for linux/amd64, pulled by skopeo and containerd\n\n")
	fmt.Printf("bench/pull.go pushes bench/apps/market for linux/amd64 (default attachments), then pulls its five images one after the other, "+
		"as a node does: `skopeo copy docker://… oci:DIR:NAME` (the fetch alone) and, where containerd is installed, `ctr images pull` "+
		"into a containerd of the bench's own (overlayfs; the fetch and the unpack into snapshots, what a kubelet waits for). _Cold_ starts "+
		"empty; _after the bump_ (ms 2.1.2 → 2.1.3 in market.orders, pushed again) starts from the previous push's images (skopeo: a copy of "+
		"the cold layout; containerd: pulled beforehand, untimed), so only what is lacking is fetched. _Layers_ is the most of any image, base "+
		"included. Received is the registry's response bodies. Medians of %d runs, under `nice`.\n\n", b.runs)
	fmt.Println("| toa-push | layers per image | pull | wall (min–max) | requests | received |")
	fmt.Println("|---|---:|---|---:|---:|---:|")
	for _, tool := range tools {
		r := rows[tool.name]
		for _, sc := range pullScenarios {
			s, ok := r.pulls[sc.key]
			if !ok {
				continue
			}
			fmt.Printf("| %s | %d | %s | %s (%s–%s) | %.0f | %s |\n", tool.name, r.layers, sc.title, secs(s.wall()),
				secs(s.minWall()), secs(s.maxWall()), s.requests(), size(s.received()))
		}
	}
	if old, ok := rows["toa-push before"]; ok {
		now := rows["toa-push"]
		for _, sc := range pullScenarios {
			n, o := now.pulls[sc.key], old.pulls[sc.key]
			if len(n) == 0 || len(o) == 0 {
				continue
			}
			fmt.Printf("- %s: %s the wall time, %s the requests and %.1f%% of the bytes of one layer per component.\n", sc.title,
				ratio(n.wall(), o.wall()), ratio(n.requests(), o.requests()), 100*n.received()/o.received())
		}
	}
	return nil
}

// pullsOf pushes the market application with the toa-push at bin in a folder of its own (ns),
// and measures the pulls of its images, cold and after the bump.
func (b *bench) pullsOf(ns, bin, base, skopeo string, node containerd) (pullRow, error) {
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
	if node.daemon == "" {
		return row, nil
	}
	for run := 0; run < b.runs; run++ {
		s, err := b.ctrPulls(node, ns, run, nil, previous)
		if err != nil {
			return row, err
		}
		row.pulls["ctr-cold"] = append(row.pulls["ctr-cold"], s)
		if s, err = b.ctrPulls(node, ns, run, previous, bumped); err != nil {
			return row, err
		}
		row.pulls["ctr-bump"] = append(row.pulls["ctr-bump"], s)
	}
	return row, nil
}

// ctrPulls starts a containerd of its own (an empty root, its own socket, overlayfs), pulls
// before into it untimed, then times `ctr images pull` of each of refs, which fetches the layers
// containerd lacks and unpacks them into snapshots, as a node's kubelet has it done.
func (b *bench) ctrPulls(node containerd, ns string, run int, before, refs []string) (sample, error) {
	key := "ctr-cold"
	if before != nil {
		key = "ctr-bump"
	}
	dir := filepath.Join(b.work, ns, fmt.Sprintf("%s-%d", key, run))
	sock := filepath.Join(dir, "containerd.sock")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sample{}, err
	}
	config := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\n"+
		"disabled_plugins = [\"io.containerd.grpc.v1.cri\", \"io.containerd.internal.v1.opt\", \"io.containerd.snapshotter.v1.btrfs\", "+
		"\"io.containerd.snapshotter.v1.zfs\", \"io.containerd.snapshotter.v1.devmapper\", \"io.containerd.snapshotter.v1.aufs\", "+
		"\"io.containerd.tracing.processor.v1.otlp\", \"io.containerd.internal.v1.tracing\"]\n"+
		"[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n[debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(config), 0o644); err != nil {
		return sample{}, err
	}
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		return sample{}, err
	}
	defer logFile.Close()
	daemon := exec.Command(node.daemon, "--config", filepath.Join(dir, "containerd.toml"), "--log-level", "warn")
	daemon.Stdout, daemon.Stderr = logFile, logFile
	if err := daemon.Start(); err != nil {
		return sample{}, fmt.Errorf("start containerd: %w", err)
	}
	defer func() {
		daemon.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- daemon.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			daemon.Process.Kill()
			<-done
		}
		os.RemoveAll(filepath.Join(dir, "root")) // the snapshots: hundreds of MB a run
	}()
	ctr := func(args ...string) []string {
		return append([]string{"nice", node.ctr, "--address", sock, "--namespace", "bench"}, args...)
	}
	ready := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if exec.CommandContext(b.ctx, node.ctr, "--address", sock, "version").Run() == nil {
			ready = true
			break
		}
	}
	if !ready {
		tail, _ := os.ReadFile(logFile.Name())
		return sample{}, fmt.Errorf("containerd did not answer on %s within 30 s: %s", sock, tail)
	}
	pull := func(ref string) []string {
		return ctr("images", "pull", "--plain-http", "--platform", "linux/amd64", ref)
	}
	for _, ref := range before {
		if _, err := b.measure(dir, nil, ns+"-"+key+"-before", pull(ref)...); err != nil {
			return sample{}, err
		}
	}
	var total sample
	for _, ref := range refs {
		s, err := b.measure(dir, nil, ns+"-"+key, pull(ref)...)
		if err != nil {
			return total, err
		}
		total.wall += s.wall
		total.requests += s.requests
		total.received += s.received
	}
	fmt.Fprintf(os.Stderr, "bench: pull, %s-%s: %s, %d requests, %s received\n", ns, key, secs(total.wall.Seconds()),
		total.requests, size(float64(total.received)))
	return total, nil
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
