package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Item 1: the pushes of bench/apps/shop (three compositions) by toa-push and by buildah running
// the 289 Dockerfiles, and for the code change crane append of the same sources layer.

var scenarios = []struct{ key, title string }{
	{"first", "first push"},
	{"nochange", "no change"},
	{"code", "one-line code change"},
	{"pkg", "one package.json changed"},
}

// subject is one tool's copy of the application, with its own image names and caches.
type subject struct {
	tool      string // "toa-push", "buildah"
	ns        string // the context's name, so the images' namespace
	app       string
	cache     string // toa-push's TOA_CACHE
	work      string
	platforms []string
	last      pushOutput // toa-push's last output
	prev      pushOutput
}

func (b *bench) newSubject(tool, ns string, platforms []string) (*subject, error) {
	s := &subject{tool: tool, ns: ns, platforms: platforms,
		app: filepath.Join(b.work, ns, "app"), cache: filepath.Join(b.work, ns, "cache"), work: filepath.Join(b.work, ns, "work")}
	err := copyTree(filepath.Join(b.repo, "bench", "apps", "shop"), s.app, map[string]func([]byte) []byte{
		"context.toa.yaml": func(data []byte) []byte { return b.context(data, ns, platforms, b.debian) },
	})
	if err != nil {
		return nil, err
	}
	if err := b.linkExtensions(s.app); err != nil {
		return nil, err
	}
	// toa-push's layers start cold; npm's cache and what it learnt of the base (its libc) are
	// warm, as buildah's npm cache mount and its copy of the base are
	if err := os.MkdirAll(s.cache, 0o755); err != nil {
		return nil, err
	}
	for _, link := range [][2]string{{b.npmCache, "npm"}, {b.libcCache, "libc"}} {
		if err := os.Symlink(link[0], filepath.Join(s.cache, link[1])); err != nil {
			return nil, err
		}
	}
	return s, os.MkdirAll(s.work, 0o755)
}

// context rewrites a bench application's context.toa.yaml for this registry.
func (b *bench) context(data []byte, ns string, platforms []string, base string) []byte {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		switch t := strings.TrimSpace(line); {
		case strings.HasPrefix(line, "name: "):
			line = "name: " + ns
		case strings.HasPrefix(t, "base: "):
			line = "  base: " + b.addr
		case strings.HasPrefix(t, "platforms: "):
			line = "  platforms: [" + strings.Join(platforms, ", ") + "]"
		case strings.HasPrefix(t, "image: "):
			line = "    image: " + base
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}

// change makes the scenario's change in the subject's application.
func (b *bench) change(s *subject, scenario string) error {
	switch scenario {
	case "code":
		f, err := os.OpenFile(filepath.Join(s.app, "components", "shop.orders", "operations.js"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString("// a one-line change\n")
		return err
	case "pkg":
		for _, f := range []string{"package.json", "package-lock.json"} {
			data, err := os.ReadFile(filepath.Join(b.repo, "bench", "apps", "changes", "shop.orders", f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(s.app, "components", "shop.orders", f), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// push runs one subject's push for the scenario.
func (b *bench) push(s *subject, scenario string, run int) (sample, error) {
	log := fmt.Sprintf("%s-%s", s.ns, scenario)
	switch s.tool {
	case "toa-push":
		// --sbom none: buildah and crane attach nothing; the default's cost is measured apart
		out, err := b.measure(s.app, []string{"TOA_CACHE=" + s.cache}, log,
			b.toaPush, "-o", "json", "--sbom", "none", "--path", s.app, "-k", filepath.Join(s.work, "deployment"))
		if err != nil {
			return out, err
		}
		s.prev = s.last
		s.last, err = parsePush(out.stdout)
		return out, err
	default:
		args := []string{"bash", filepath.Join(b.repo, "bench", "peer", "buildah-push.sh"), s.app, strings.Join(s.platforms, ",")}
		if scenario == "first" {
			args = append(args, "--no-cache") // a runner that never built this application
		}
		return b.measure(s.app, []string{"BUILDAH=" + strings.Join(b.buildah, " "), "TOA_PUSH=" + b.toaPush,
			"WORK=" + filepath.Join(s.work, scenario)}, log, args...)
	}
}

// pushSet is the measurements of one set of platforms.
type pushSet struct {
	platforms []string
	samples   map[string]map[string]series // scenario → tool → samples
	minimal   series                       // code change: the new blobs, manifests and index alone (in sent)
	logs      map[string][]string          // toa-push's request logs of the last run, by scenario
	profile   []string                     // the processes of one more code-change push, under strace
	attested  series                       // one more code change per run, with toa-push's default SBOM and provenance
	peerRuns  int
}

func (b *bench) pushes() error {
	if b.debian == "" {
		return fmt.Errorf("no bench base: set BENCH_ROOTFS_AMD64 (testdata/bench.sh does)")
	}
	if before := os.Getenv("BENCH_PUSH_AB"); before != "" {
		return b.pairedCodeChanges(before) // pushab.go: the code change alone, paired with another build
	}
	if b.peers {
		if err := b.prepareBuildah(); err != nil {
			return err
		}
	}
	peerRuns := b.pushRuns
	if !b.peers {
		peerRuns = 0
	}
	sets := []*pushSet{{platforms: []string{"linux/amd64"}, peerRuns: peerRuns}}
	if len(b.debianPlatforms) > 1 {
		peerRuns := 0
		if b.peerArm64 && b.peers {
			peerRuns = b.peerRunsMulti()
		}
		sets = append(sets, &pushSet{platforms: b.debianPlatforms, peerRuns: peerRuns})
	}
	for _, set := range sets {
		if err := b.pushSet(set); err != nil {
			return err
		}
	}
	b.printPushes(sets)
	return nil
}

// peerRunsMulti is how many runs buildah gets for two platforms: its arm64 RUN goes through
// qemu, minutes per run, so one unless BENCH_PEER_MULTI_RUNS says more.
func (b *bench) peerRunsMulti() int {
	var n int
	if _, err := fmt.Sscan(envOr("BENCH_PEER_MULTI_RUNS", "1"), &n); err != nil || n < 0 {
		return 1
	}
	return n
}

// prepareBuildah empties buildah's storage of earlier runs' images but the base, and pulls the
// base, so that every buildah run starts with the base at hand, as a runner that used it before.
func (b *bench) prepareBuildah() error {
	// item 1's base stays: pulled once, it is in buildah's storage before every run
	b.emptyBuildah(func(name, _ string) bool { return strings.Contains(name, "/"+strings.Split(debianBase, ":")[0]) })
	return b.pullBuildah()
}

// emptyBuildah removes buildah's containers and every image but those keep says to keep (by
// repository and tag), then the layers no image uses.
func (b *bench) emptyBuildah(keep func(name, tag string) bool) {
	buildah := func(args ...string) *exec.Cmd { return exec.Command(b.buildah[0], append(b.buildah[1:], args...)...) }
	_ = buildah("rm", "--all").Run() // an empty storage says so and fails
	out, _ := buildah("images", "--noheading", "--format", "{{.ID}} {{.Name}} {{.Tag}}").Output()
	var stale []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && !keep(f[1], f[2]) {
			stale = append(stale, f[0])
		}
	}
	if len(stale) > 0 {
		_ = buildah(append([]string{"rmi", "--force"}, stale...)...).Run()
	}
	_ = buildah("rmi", "--prune").Run()
}

// pullBuildah pulls b.debian for b.debianPlatforms into buildah's storage.
func (b *bench) pullBuildah() error {
	buildah := func(args ...string) *exec.Cmd { return exec.Command(b.buildah[0], append(b.buildah[1:], args...)...) }
	// the runner's own platform last: buildah's local name of the base is the last one pulled,
	// and a build for another platform pulls its own (from the blobs it already has)
	platforms := append([]string(nil), b.debianPlatforms...)
	sort.SliceStable(platforms, func(i, j int) bool { return platforms[j] == "linux/"+runtime.GOARCH && platforms[i] != platforms[j] })
	for _, p := range platforms {
		if out, err := buildah("pull", "--tls-verify=false", "--platform", p, b.debian).CombinedOutput(); err != nil {
			return fmt.Errorf("buildah pull %s: %v\n%s", b.debian, err, out)
		}
	}
	return nil
}

func platformTag(platforms []string) string {
	var parts []string
	for _, p := range platforms {
		parts = append(parts, strings.ReplaceAll(strings.TrimPrefix(p, "linux/"), "/", ""))
	}
	return strings.Join(parts, "-")
}

func (b *bench) pushSet(set *pushSet) error {
	set.samples = map[string]map[string]series{}
	set.logs = map[string][]string{}
	for _, sc := range scenarios {
		set.samples[sc.key] = map[string]series{}
	}
	tag := platformTag(set.platforms)
	for run := 1; run <= b.pushRuns; run++ {
		tools := []string{"toa-push", "buildah"}
		if run%2 == 0 {
			tools = []string{"buildah", "toa-push"}
		}
		subjects := map[string]*subject{}
		for _, tool := range tools {
			if tool == "buildah" && run > set.peerRuns {
				continue
			}
			short := map[string]string{"toa-push": "toa", "buildah": "buildah"}[tool]
			s, err := b.newSubject(tool, fmt.Sprintf("shop-%s-%s-r%d", tag, short, run), set.platforms)
			if err != nil {
				return err
			}
			subjects[tool] = s
		}
		if run == b.pushRuns {
			defer func() {
				// one more code change, under strace: where toa-push's time goes
				s := subjects["toa-push"]
				if b.change(s, "code") != nil {
					return
				}
				lines, err := b.timeline(s.app, []string{"TOA_CACHE=" + s.cache}, s.ns+"-strace",
					b.toaPush, "-o", "json", "--sbom", "none", "--path", s.app, "-k", filepath.Join(s.work, "deployment"))
				if err != nil {
					set.profile = []string{"strace: " + err.Error()}
					return
				}
				set.profile = lines
			}()
		}
		for _, sc := range scenarios {
			for _, tool := range tools {
				s := subjects[tool]
				if s == nil {
					continue
				}
				if err := b.change(s, sc.key); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "bench: push %s, %s, %s, run %d\n", tag, sc.title, tool, run)
				out, err := b.push(s, sc.key, run)
				if err != nil {
					return err
				}
				set.samples[sc.key][tool] = append(set.samples[sc.key][tool], out)
				if tool != "toa-push" {
					continue
				}
				var buf bytes.Buffer
				requestLog(&buf, out.log)
				set.logs[sc.key] = strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
				if sc.key == "code" {
					minimal, craned, err := b.craneAppend(s, run)
					if err != nil {
						return err
					}
					set.minimal = append(set.minimal, minimal)
					set.samples[sc.key]["crane"] = append(set.samples[sc.key]["crane"], craned)
				}
			}
		}
		if s := subjects["toa-push"]; s != nil {
			// a runner that attaches by default attached to the image before: one code change
			// unmeasured (its SBOM reads the layers of the dependencies image and of the base,
			// once a machine), then the one measured
			for _, warm := range []bool{true, false} {
				if err := b.change(s, "code"); err != nil {
					return err
				}
				out, err := b.measure(s.app, []string{"TOA_CACHE=" + s.cache}, s.ns+"-attested",
					b.toaPush, "-o", "json", "--path", s.app, "-k", filepath.Join(s.work, "deployment"))
				if err != nil {
					return err
				}
				if !warm {
					set.attested = append(set.attested, out)
				}
			}
		}
	}
	return nil
}

// craneAppend measures the floor of a code change: crane append of the sources layer toa-push
// wrote for the changed component, onto the same dependencies image, per platform, and crane
// index append for the index, into a repository of its own that has the dependencies image.
// It also returns, as a sample whose sent is all that counts, the size of what a code change
// must send: the new layer, configs, manifests and index of toa-push's push.
func (b *bench) craneAppend(s *subject, run int) (minimal, craned sample, err error) {
	front := func(out pushOutput) (string, string) {
		for _, img := range out.Images {
			if img.Name == "composition-front" {
				return img.Repository, img.Digest
			}
		}
		return "", ""
	}
	repo, newDigest := front(s.last)
	_, oldDigest := front(s.prev)
	if repo == "" || oldDigest == "" || newDigest == oldDigest {
		return minimal, craned, fmt.Errorf("code change: composition-front was not rebuilt (%s → %s)", oldDigest, newDigest)
	}
	newIdx, err := readIndex(repo + "@" + newDigest)
	if err != nil {
		return minimal, craned, err
	}
	oldIdx, err := readIndex(repo + "@" + oldDigest)
	if err != nil {
		return minimal, craned, err
	}
	old := map[string]bool{}
	for _, img := range oldIdx.images {
		for _, l := range img.manifest.Layers {
			old[l.Digest.String()] = true
		}
		old[img.manifest.Config.Digest.String()] = true
	}
	minimal.sent = int64(len(newIdx.raw))
	var layer v1.Hash
	seen := map[string]bool{}
	for _, img := range newIdx.images {
		minimal.sent += int64(len(img.raw))
		blobs := append([]v1.Descriptor{img.manifest.Config}, img.manifest.Layers...)
		for _, d := range blobs {
			if !old[d.Digest.String()] && !seen[d.Digest.String()] {
				seen[d.Digest.String()] = true
				minimal.sent += d.Size
				if d.MediaType != img.manifest.Config.MediaType {
					layer = d.Digest
				}
			}
		}
	}
	layerFile := filepath.Join(s.cache, "layers", "sha256", layer.Hex+".tar.gz")
	if _, err := os.Stat(layerFile); err != nil {
		return minimal, craned, fmt.Errorf("the new sources layer is not in toa-push's cache: %w", err)
	}
	// the dependencies image, copied to crane's repository (not measured)
	tag, err := depsTag(repo)
	if err != nil {
		return minimal, craned, err
	}
	deps := repo + ":" + tag
	craneRepo := b.addr + "/" + s.ns + "-crane/composition-front"
	depsIdx, err := copyIndex(deps, craneRepo+":deps")
	if err != nil {
		return minimal, craned, err
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	var tags []string
	for _, img := range depsIdx.Manifests {
		arch := img.Platform.Architecture + img.Platform.Variant
		t := craneRepo + ":crane-" + arch
		fmt.Fprintf(&script, "%q append -b %q -f %q -t %q >/dev/null\n", b.crane, craneRepo+"@"+img.Digest.String(), layerFile, t)
		tags = append(tags, "-m "+fmt.Sprintf("%q", t))
	}
	fmt.Fprintf(&script, "%q index append %s -t %q >/dev/null\n", b.crane, strings.Join(tags, " "), craneRepo+":crane")
	fmt.Fprintf(os.Stderr, "bench: push %s, crane append, run %d\n", platformTag(s.platforms), run)
	craned, err = b.measure(s.work, nil, s.ns+"-crane", "bash", "-c", script.String())
	return minimal, craned, err
}

// depsTag is the deps-<hash> tag of an image's repository: at the code change there is one.
func depsTag(repo string) (string, error) {
	r, err := name.NewRepository(repo, name.Insecure)
	if err != nil {
		return "", err
	}
	tags, err := remote.List(r)
	if err != nil {
		return "", err
	}
	for _, t := range tags {
		if strings.HasPrefix(t, "deps-") {
			return t, nil
		}
	}
	return "", fmt.Errorf("%s has no deps- tag", repo)
}

type readImage struct {
	raw      []byte
	manifest *v1.Manifest
}

type readIndexResult struct {
	raw    []byte
	images []readImage
}

func readIndex(ref string) (*readIndexResult, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return nil, err
	}
	idx, err := remote.Index(r)
	if err != nil {
		return nil, err
	}
	out := &readIndexResult{}
	if out.raw, err = idx.RawManifest(); err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		raw, err := img.RawManifest()
		if err != nil {
			return nil, err
		}
		man, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		out.images = append(out.images, readImage{raw: raw, manifest: man})
	}
	return out, nil
}

// copyIndex copies an index within the registry (blobs are mounted) and returns its manifest.
func copyIndex(from, to string) (*v1.IndexManifest, error) {
	src, err := name.ParseReference(from, name.Insecure)
	if err != nil {
		return nil, err
	}
	dst, err := name.ParseReference(to, name.Insecure)
	if err != nil {
		return nil, err
	}
	idx, err := remote.Index(src)
	if err != nil {
		return nil, err
	}
	if err := remote.WriteIndex(dst, idx); err != nil {
		return nil, err
	}
	return idx.IndexManifest()
}
