package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

type bench struct {
	ctx  context.Context
	t    *tb
	work string
	repo string // the checkout
	addr string // the registry, through the recording proxy
	rec  *harness.Recorder
	runs int
	// pushRuns are item 1's runs; peers false leaves buildah out of item 1
	pushRuns int
	peers    bool

	toaPush, toaApply, crane string
	buildah                  []string // buildah with its own storage
	nodeVersion              string
	debian                   string // the bench base (all the platforms it has)
	debianPlatforms          []string
	npmCache, libcCache      string         // warm caches shared by every toa-push run
	peerArm64                bool           // buildah can RUN for linux/arm64 (qemu-user-static, binfmt_misc)
	far                      *harness.Paced // the far registry of item 1's paired run, while it is on (pushab.go)
}

func newBench(ctx context.Context) (*bench, error) {
	work, err := workDir()
	if err != nil {
		return nil, err
	}
	repo, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	b := &bench{ctx: ctx, work: work, repo: repo, t: newTB(ctx, work)}
	// BENCH_TOA_PUSH measures another build in its place (an earlier commit's, for a before/after)
	b.toaPush = envOr("BENCH_TOA_PUSH", filepath.Join(repo, "bin", "toa-push"))
	b.toaApply = filepath.Join(repo, "bin", "toa-apply")
	b.crane = envOr("CRANE", "crane")
	storage := envOr("BENCH_BUILDAH_STORAGE", filepath.Join(filepath.Dir(work), "buildah"))
	b.buildah = []string{"buildah", "--root", filepath.Join(storage, "root"), "--runroot", filepath.Join(storage, "runroot"),
		"--storage-driver", envOr("BENCH_BUILDAH_DRIVER", "overlay")}
	out, err := exec.Command("node", "-p", "process.versions.node").Output()
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	b.nodeVersion = strings.TrimSpace(string(out))
	b.npmCache = filepath.Join(filepath.Dir(work), "npm-cache")
	b.libcCache = filepath.Join(filepath.Dir(work), "libc-cache")
	for _, d := range []string{b.npmCache, b.libcCache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	err = b.safely(func() error {
		b.addr, b.rec = harness.RegistryWithLog(b.t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	rootfs := map[string]string{}
	if f := os.Getenv("BENCH_ROOTFS_AMD64"); f != "" {
		rootfs["linux/amd64"] = f
	}
	if f := os.Getenv("BENCH_ROOTFS_ARM64"); f != "" {
		rootfs["linux/arm64"] = f
	}
	if len(rootfs) > 0 {
		if b.debian, err = pushDebianBase(b.addr, b.nodeVersion, rootfs); err != nil {
			return nil, err
		}
		for _, p := range []string{"linux/amd64", "linux/arm64"} {
			if rootfs[p] != "" {
				b.debianPlatforms = append(b.debianPlatforms, p)
			}
		}
	}
	b.peerArm64 = os.Getenv("BENCH_PEER_ARM64") == "1" && rootfs["linux/arm64"] != ""
	return b, nil
}

func (b *bench) close() { b.t.close() }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// header prints the date and the machine.
func (b *bench) header() {
	fmt.Printf("## Run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	cpu := "?"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	mem := "?"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.SplitN(string(data), "\n", 2)[0], "MemTotal: %d kB", &kb)
		mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	debian, _ := os.ReadFile("/etc/debian_version")
	npm, _ := exec.Command("npm", "--version").Output()
	bver, _ := exec.Command("buildah", "--version").Output()
	cver, _ := exec.Command(b.crane, "version").Output()
	load, _ := os.ReadFile("/proc/loadavg")
	defer fmt.Printf("Load average when the benchmark started: %s (other sessions share this machine; their builds and tests are in the figures).\n",
		strings.Join(strings.Fields(string(load))[:3], ", "))
	fmt.Printf("Machine: %d cores (%s), %s of memory, Linux %s, Debian %s; Go %s, node %s, npm %s; %s; crane %s. "+
		"Registry: Distribution (Debian's docker-registry) on 127.0.0.1, storage on local disk, behind the harness's recording proxy. "+
		"Items 2, 3 and 5: medians of %d runs; item 1: of %d runs (buildah for two platforms: %s); the tools alternate which goes first.\n",
		runtime.NumCPU(), cpu, mem, strings.TrimSpace(string(kernel)), strings.TrimSpace(string(debian)), runtime.Version(),
		b.nodeVersion, strings.TrimSpace(string(npm)), strings.TrimSpace(string(bver)), strings.TrimSpace(string(cver)), b.runs, b.pushRuns, envOr("BENCH_PEER_MULTI_RUNS", "1"))
}

// sample is one measured command: its wall time and what it asked of the registry.
type sample struct {
	wall                                         time.Duration
	requests, uploads, manifestPuts, heads, gets int
	blobGets, mounts                             int
	sent                                         int64 // request bodies: what was uploaded
	received                                     int64 // response bodies
	stdout                                       []byte
	log                                          []harness.Request
}

// measure runs argv in dir with env added, and returns its wall time and the registry's log for
// the run. A failed command is an error with the end of its output.
func (b *bench) measure(dir string, env []string, logName string, argv ...string) (sample, error) {
	b.rec.Reset()
	cmd := exec.CommandContext(b.ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout bytes.Buffer
	logFile, err := os.Create(filepath.Join(b.work, logName+".log"))
	if err != nil {
		return sample{}, err
	}
	defer logFile.Close()
	cmd.Stdout = &stdout
	cmd.Stderr = logFile
	// what the last command wrote (hundreds of MB of unpacked bases, buildah's images) is on the
	// disk before this one starts, so that its writeback is not in this command's time
	syscall.Sync()
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if err != nil {
		tail, _ := os.ReadFile(logFile.Name())
		if len(tail) > 3000 {
			tail = tail[len(tail)-3000:]
		}
		return sample{}, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tail)
	}
	out := b.collect(wall, stdout.Bytes())
	if f, err := os.Create(filepath.Join(b.work, logName+".requests")); err == nil {
		for _, r := range out.log {
			fmt.Fprintf(f, "%s %s?%s %d sent=%d received=%d\n", r.Method, r.Path, r.Query, r.Status, r.Bytes, r.ResponseBytes)
		}
		f.Close()
	}
	return out, nil
}

func (b *bench) collect(wall time.Duration, stdout []byte) sample {
	s := sample{wall: wall, stdout: stdout, log: b.rec.Requests()}
	for _, r := range s.log {
		s.requests++
		s.sent += r.Bytes
		s.received += r.ResponseBytes
		switch {
		case r.IsBlobUpload():
			s.uploads++
		case r.IsManifestPut():
			s.manifestPuts++
		case r.IsMount():
			s.mounts++
		case r.IsBlobGet():
			s.blobGets++
		}
		switch r.Method {
		case http.MethodHead:
			s.heads++
		case http.MethodGet:
			s.gets++
		}
	}
	return s
}

// series collects samples of one measurement over the runs.
type series []sample

func (s series) median(f func(sample) float64) float64 {
	v := make([]float64, len(s))
	for i, x := range s {
		v[i] = f(x)
	}
	return median(v)
}

// median is the middle of the values (the mean of the two middle ones for an even count), 0 for
// none; v is sorted.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (s series) wall() float64 { return s.median(func(x sample) float64 { return x.wall.Seconds() }) }
func (s series) requests() float64 {
	return s.median(func(x sample) float64 { return float64(x.requests) })
}
func (s series) sent() float64    { return s.median(func(x sample) float64 { return float64(x.sent) }) }
func (s series) minWall() float64 { return s.min(func(x sample) float64 { return x.wall.Seconds() }) }
func (s series) maxWall() float64 { return -s.min(func(x sample) float64 { return -x.wall.Seconds() }) }
func (s series) min(f func(sample) float64) float64 {
	m := 0.0
	for i, x := range s {
		if v := f(x); i == 0 || v < m {
			m = v
		}
	}
	return m
}

func secs(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

func size(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}

// copyTree copies a folder, with edit applied to files whose name it maps.
func copyTree(src, dst string, edit map[string]func([]byte) []byte) error {
	return filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			if info.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if f := edit[info.Name()]; f != nil {
			data = f(data)
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
}

// pushOutput is what toa-push -o json prints.
type pushOutput struct {
	Images []struct {
		Name       string `json:"name"`
		Repository string `json:"repository"`
		Tag        string `json:"tag"`
		Digest     string `json:"digest"`
		Built      bool   `json:"built"`
		DepsBuilt  bool   `json:"dependenciesBuilt"`
		BytesSent  int64  `json:"bytesSent"`
		Requests   int64  `json:"requests"`
	} `json:"images"`
}

func parsePush(stdout []byte) (pushOutput, error) {
	var out pushOutput
	if err := json.Unmarshal(stdout, &out); err != nil {
		return out, fmt.Errorf("toa-push -o json: %w: %s", err, stdout)
	}
	return out, nil
}

// requestLog prints a registry log compactly: method, path shape and status, with counts.
func requestLog(w io.Writer, log []harness.Request) {
	type key struct {
		method, what string
		status       int
	}
	counts := map[key]int{}
	var order []key
	for _, r := range log {
		k := key{r.Method, shape(r), r.Status}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	for _, k := range order {
		fmt.Fprintf(w, "    %3d × %-4s %-60s %d\n", counts[k], k.method, k.what, k.status)
	}
}

// shape names a request's path by its kind: /v2/<repo>/manifests/<tag|digest>, blobs, uploads.
func shape(r harness.Request) string {
	p := strings.TrimPrefix(r.Path, "/v2/")
	if p == "" || p == "/v2" {
		return "/v2/ (ping)"
	}
	for _, kind := range []string{"/manifests/", "/blobs/uploads/", "/blobs/"} {
		if i := strings.Index(p, kind); i >= 0 {
			repo, rest := p[:i], p[i+len(kind):]
			switch {
			case kind == "/blobs/uploads/" && r.IsMount():
				rest = "?mount"
			case kind == "/blobs/uploads/":
				rest = "<upload>"
			case strings.HasPrefix(rest, "sha256:"):
				rest = "<digest>"
			case strings.HasPrefix(rest, "deps-"):
				rest = "deps-<tag>"
			default:
				rest = "<tag>"
			}
			return repo + kind + rest
		}
	}
	return r.Path
}

// linkExtensions links the stand-in extension packages of testdata/packages under an application's
// node_modules, where toa-push reads what the extensions deploy (as the testdata applications
// have them).
func (b *bench) linkExtensions(app string) error {
	dir := filepath.Join(app, "node_modules", "@toa.io")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for link, pkg := range map[string]string{"bindings.amqp": "amqp", "storages.mongodb": "mongodb", "extensions.telemetry": "telemetry"} {
		target := filepath.Join(b.repo, "testdata", "packages", "extensions", pkg)
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil && !os.IsExist(err) {
			return err
		}
	}
	return nil
}
