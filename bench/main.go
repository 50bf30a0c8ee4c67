// Command bench measures toa-push (and toa-apply) against what users would pick instead, on this
// machine, in one run: `make bench` runs it through testdata/bench.sh, which installs the peers
// first. It prints Markdown tables of medians and ratios; BENCHMARKS.md keeps the latest output.
//
//	go run ./bench [-runs 5] [-items 1,2,3,4,5,6] every benchmark
//	go run ./bench serve                          a registry behind the recording proxy, with the
//	                                              bases, until interrupted (to try things by hand)
//
// It needs bin/toa-push (make build), buildah, crane ($CRANE) and the rootfs of bench/rootfs.sh
// ($BENCH_ROOTFS_AMD64, $BENCH_ROOTFS_ARM64), which testdata/bench.sh provides.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	runs := flag.Int("runs", 5, "runs of each measurement; the tables show medians")
	items := flag.String("items", "1,2,3,4,5,6", "which benchmarks to run (1-5 of issue 7, 6 of issue 15, 7 and 9 of issue 24, 8 of issue 23, 10 of issue 38, 11 of issue 36)")
	pushRuns := flag.Int("push-runs", 3, "runs of item 1 (buildah's first push is minutes a run)")
	peers := flag.Bool("peers", true, "measure buildah in item 1 (false: toa-push and crane alone, for a quick look)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	b, err := newBench(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	defer b.close()
	if flag.Arg(0) == "serve" {
		fmt.Println(b.addr)
		<-ctx.Done()
		return
	}
	b.runs, b.pushRuns, b.peers = *runs, *pushRuns, *peers
	want := map[string]bool{}
	for _, i := range strings.Split(*items, ",") {
		want[strings.TrimSpace(i)] = true
	}
	start := time.Now()
	b.header()
	steps := []struct {
		item string
		run  func() error
	}{
		{"1", b.pushes}, {"2", b.sourcesLayer}, {"3", b.scale}, {"4", b.memory}, {"5", b.apply}, {"6", b.firstPushes}, {"7", b.market}, {"8", b.native}, {"9", b.pulls}, {"10", b.large}, {"11", b.scripts},
	}
	failed := false
	for _, s := range steps {
		if !want[s.item] {
			continue
		}
		if err := b.safely(s.run); err != nil {
			fmt.Fprintf(os.Stderr, "bench: item %s: %v\n", s.item, err)
			fmt.Printf("\nItem %s failed: %v\n", s.item, err)
			failed = true
		}
	}
	fmt.Printf("\n_The benchmark took %s._\n", time.Since(start).Round(time.Second))
	if failed {
		b.close()
		os.Exit(1)
	}
}

// safely turns a panic of the harness (a failed setup) into an error.
func (b *bench) safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return f()
}

// work is the folder of this run, under $TOA_CACHE/bench/run.
func workDir() (string, error) {
	cache := os.Getenv("TOA_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "toa-deploy")
	}
	dir := filepath.Join(cache, "bench", "run")
	if d := os.Getenv("BENCH_WORK"); d != "" {
		dir = d // a second run beside another, by hand
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}
