package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Item 4: the peak RSS of toa-push pushing a component whose node_modules is 1 GiB.

// bigPackage is a local package of 1 GiB of random (incompressible) files: one of 256 MiB and 768
// of 1 MiB, kept under $TOA_CACHE/bench/big.
func (b *bench) bigPackage() (string, error) {
	dir := filepath.Join(filepath.Dir(b.work), "big", "pkg")
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return "", err
	}
	pkg := `{"name": "big", "version": "1.0.0", "description": "1 GiB of random files for toa-deploy's memory benchmark", "files": ["data", "index.js"]}`
	os.WriteFile(filepath.Join(dir, "package.json"), []byte(pkg+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "index.js"), []byte("module.exports = 'big'\n"), 0o644)
	rng := rand.NewChaCha8([32]byte{'t', 'o', 'a'})
	write := func(name string, n int) error {
		f, err := os.Create(filepath.Join(dir, "data", name))
		if err != nil {
			return err
		}
		buf := make([]byte, 1<<20)
		for written := 0; written < n; written += len(buf) {
			rng.Read(buf)
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return err
			}
		}
		return f.Close()
	}
	if err := write("large.bin", 256<<20); err != nil {
		return "", err
	}
	for i := 0; i < 768; i++ {
		if err := write(fmt.Sprintf("part-%03d.bin", i), 1<<20); err != nil {
			return "", err
		}
	}
	return dir, os.WriteFile(done, nil, 0o644)
}

// bigApp is an application of one composition whose component depends on the big package
// through file:, installed as a copy (install-links=true in the component's .npmrc).
func (b *bench) bigApp(dir, ns, pkg string) error {
	c := filepath.Join(dir, "components", "big.store")
	if err := os.MkdirAll(c, 0o755); err != nil {
		return err
	}
	base := b.debian
	ctx := fmt.Sprintf("name: %s\nruntime: 1.0.0-alpha.289\nregistry:\n  base: %s\n  platforms: [linux/amd64]\n  build:\n    image: %s\n"+
		"resources:\n  cpu: [100m, 500m]\n  memory: [128Mi, 256Mi]\namqp: amqp://rabbitmq\n", ns, b.addr, base)
	files := map[string]string{
		filepath.Join(dir, "context.toa.yaml"): ctx,
		filepath.Join(c, "manifest.toa.yaml"):  "operations:\n  size:\n    output: integer\n",
		filepath.Join(c, "operations.js"):      "'use strict'\n\nexports.size = async () => require('big').length\n",
		filepath.Join(c, ".npmrc"):             "install-links=true\n",
		filepath.Join(c, "package.json"):       fmt.Sprintf(`{"name": "big-store", "private": true, "dependencies": {"big": "file:%s"}}`+"\n", pkg),
	}
	for f, data := range files {
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			return err
		}
	}
	if err := b.linkExtensions(dir); err != nil {
		return err
	}
	lock := exec.Command("npm", "install", "--package-lock-only", "--no-audit", "--no-fund")
	lock.Dir = c
	if out, err := lock.CombinedOutput(); err != nil {
		return fmt.Errorf("npm install --package-lock-only: %v: %s", err, out)
	}
	return nil
}

// rss runs toa-push under /usr/bin/time -v and returns its wall time, the maximum RSS time -v
// reports (the largest of toa-push and the processes it waited for: npm), and toa-push's own
// peak (VmHWM, read from /proc every 20 ms while it runs).
func (b *bench) rss(env []string, log string, argv ...string) (wall time.Duration, timeRSS, ownRSS int64, err error) {
	timeOut := filepath.Join(b.work, log+".time")
	args := append([]string{"-v", "-o", timeOut}, argv...)
	cmd := exec.CommandContext(b.ctx, "/usr/bin/time", args...)
	cmd.Env = append(os.Environ(), env...)
	logFile, err := os.Create(filepath.Join(b.work, log+".log"))
	if err != nil {
		return 0, 0, 0, err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, err
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		child := 0
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if child == 0 {
				data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
				child, _ = strconv.Atoi(strings.TrimSpace(string(data)))
				continue
			}
			if kb := vmHWM(child); kb > peak.Load() {
				peak.Store(kb)
			}
		}
	}()
	err = cmd.Wait()
	wall = time.Since(start)
	close(stop)
	<-done
	if err != nil {
		tail, _ := os.ReadFile(logFile.Name())
		return 0, 0, 0, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tail)
	}
	f, err := os.Open(timeOut)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Maximum resident set size (kbytes):"); ok {
			timeRSS, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return wall, timeRSS << 10, peak.Load() << 10, nil
}

func vmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

func (b *bench) memory() error {
	if b.debian == "" {
		return fmt.Errorf("no bench base: set BENCH_ROOTFS_AMD64")
	}
	pkg, err := b.bigPackage()
	if err != nil {
		return err
	}
	dir := filepath.Join(b.work, "memory")
	cache := filepath.Join(dir, "cache")
	os.MkdirAll(cache, 0o755)
	os.Symlink(b.npmCache, filepath.Join(cache, "npm"))
	os.Symlink(b.libcCache, filepath.Join(cache, "libc"))
	type row struct {
		what            string
		wall            time.Duration
		timeRSS, ownRSS int64
		sent            int64
		requests        int
	}
	var rows []row
	// one install (npm copies the 1 GiB, minutes) and one push of the cached layer: the peak
	// hardly moves between runs, the time budget of make bench does
	runs := 1
	for run := 0; run <= runs; run++ {
		// run 0 installs (npm copies the package), writes the 1 GiB layer and pushes it; the
		// next runs find the layer in the cache and push it again to a namespace of their own
		ns := fmt.Sprintf("big-r%d", run)
		app := filepath.Join(dir, ns)
		if err := b.bigApp(app, ns, pkg); err != nil {
			return err
		}
		what := "push only (layer cached)"
		if run == 0 {
			what = "install + layer + push"
		}
		fmt.Fprintf(os.Stderr, "bench: memory, %s, run %d\n", what, run)
		b.rec.Reset()
		wall, timeRSS, ownRSS, err := b.rss([]string{"TOA_CACHE=" + cache}, "memory-"+ns,
			b.toaPush, "-o", "json", "--path", app, "-k", filepath.Join(app, "deployment"))
		if err != nil {
			return err
		}
		s := b.collect(wall, nil)
		rows = append(rows, row{what: what, wall: wall, timeRSS: timeRSS, ownRSS: ownRSS, sent: s.sent, requests: s.requests})
	}
	os.RemoveAll(cache) // the 1 GiB layer; the logs stay
	fmt.Printf("\n### 4. Memory: a component whose node_modules is 1 GiB\n\n")
	fmt.Printf("The component depends on a local `file:` package of 1 GiB of random files (one of 256 MiB, 768 of 1 MiB), " +
		"which npm copies into node_modules (`install-links=true` in the component's .npmrc). Peak RSS as `/usr/bin/time -v` reports it " +
		"(the largest of toa-push and the children it waited for, npm among them) and toa-push's own (VmHWM from /proc, sampled every 20 ms).\n\n")
	fmt.Println("| run | time | max RSS (time -v) | toa-push's own peak | sent | requests |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %s | %s | %d |\n", r.what, secs(r.wall.Seconds()), size(float64(r.timeRSS)), size(float64(r.ownRSS)), size(float64(r.sent)), r.requests)
	}
	maxOwn, maxTime := int64(0), int64(0)
	for _, r := range rows {
		maxOwn = max(maxOwn, r.ownRSS)
		maxTime = max(maxTime, r.timeRSS)
	}
	fmt.Printf("\n- toa-push's peak RSS for the 1 GiB push: %s at most (target < 200 MiB): %s.", size(float64(maxOwn)), verdict(maxOwn < 200<<20))
	fmt.Printf(" With npm's install counted (time -v): %s.\n", size(float64(maxTime)))
	return nil
}
