package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Item 1's code change, paired: with BENCH_PUSH_AB naming another toa-push (an earlier
// commit's), item 1 runs only this. One copy of bench/apps/shop for linux/amd64 is pushed once,
// then in each of BENCH_PUSH_AB_ROUNDS rounds (15) crane append and the two builds, each with
// the default attachments and with --sbom none, push a one-line code change each, in an order
// that turns with the round; the ratios are taken round by round, so that what the machine's
// load does to one round it does to all five of its pushes. BENCH_PUSH_AB_RTT (a Go duration,
// none by default) puts the registry that far away for these pushes, crane's too: each request
// waits that long before it goes on, as a round trip to a registry across a network would.

// abVariant is one of the pushes of a round.
type abVariant struct {
	key, title string
	bin        string // "" for crane
	none       bool   // --sbom none
}

func (b *bench) pairedCodeChanges(before string) error {
	rounds := 15
	if n, err := strconv.Atoi(os.Getenv("BENCH_PUSH_AB_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	variants := []abVariant{{key: "crane", title: "crane append + index append"},
		{key: "now", title: "this build, default attachments", bin: b.toaPush},
		{key: "before", title: "the build before, default attachments", bin: before},
		{key: "now-none", title: "this build, `--sbom none`", bin: b.toaPush, none: true},
		{key: "before-none", title: "the build before, `--sbom none`", bin: before, none: true}}
	rtt := time.Duration(0)
	if d, err := time.ParseDuration(os.Getenv("BENCH_PUSH_AB_RTT")); err == nil && d > 0 {
		rtt = d
		restore := b.farRegistry(d)
		defer restore()
	}
	s, err := b.newSubject("toa-push", "shop-ab", []string{"linux/amd64"})
	if err != nil {
		return err
	}
	if _, err := b.abPush(s, variants[3], "first"); err != nil {
		return err
	}
	// a code change with attachments by each build, unmeasured: the first reads the layers for
	// the SBOM (once a machine), and both have pushed one before the rounds
	for _, v := range variants[1:3] {
		if err := b.change(s, "code"); err != nil {
			return err
		}
		if _, err := b.abPush(s, v, "warm"); err != nil {
			return err
		}
	}
	samples := map[string]series{}
	loads := []string{loadAverage()}
	for round := range rounds {
		for i := range variants {
			v := variants[(i+round)%len(variants)]
			var out sample
			if v.bin == "" {
				_, out, err = b.craneAppend(s, round+1)
			} else {
				if err = b.change(s, "code"); err != nil {
					return err
				}
				out, err = b.abPush(s, v, fmt.Sprintf("r%d", round+1))
			}
			if err != nil {
				return err
			}
			samples[v.key] = append(samples[v.key], out)
		}
		loads = append(loads, loadAverage())
	}
	b.printPaired(variants, samples, loads, rtt)
	return nil
}

// farRegistry puts a proxy that delays each request by rtt in front of the registry
// (harness.Far), and has item 1's pushes go through it until restore; it keeps when each
// request came and was answered (b.far).
func (b *bench) farRegistry(rtt time.Duration) (restore func()) {
	b.far = harness.PacedProxy(b.t, b.addr, harness.Far(rtt))
	addr, debian := b.addr, b.debian
	b.addr = b.far.Addr
	b.debian = strings.Replace(debian, addr, b.addr, 1)
	return func() {
		b.addr, b.debian, b.far = addr, debian, nil
	}
}

// abPush pushes the subject's application with one variant's build and records its output, for
// the crane append that follows.
func (b *bench) abPush(s *subject, v abVariant, what string) (sample, error) {
	args := []string{v.bin, "-o", "json"}
	if v.none {
		args = append(args, "--sbom", "none")
	}
	args = append(args, "--path", s.app, "-k", filepath.Join(s.work, "deployment"))
	fmt.Fprintf(os.Stderr, "bench: paired code change, %s, %s\n", v.key, what)
	if b.far != nil {
		b.far.Reset()
	}
	out, err := b.measure(s.app, []string{"TOA_CACHE=" + s.cache}, s.ns+"-"+v.key+"-"+what, args...)
	if err != nil {
		return out, err
	}
	if b.far != nil {
		writeTimeline(filepath.Join(b.work, s.ns+"-"+v.key+"-"+what+".timeline"), b.far.Requests())
	}
	s.prev = s.last
	s.last, err = parsePush(out.stdout)
	return out, err
}

func (b *bench) printPaired(variants []abVariant, samples map[string]series, loads []string, rtt time.Duration) {
	crane := samples["crane"]
	far := ""
	if rtt > 0 {
		far = fmt.Sprintf(", the registry %s away", rtt)
	}
	fmt.Printf("\n### Item 1, paired: a one-line code change of bench/apps/shop, linux/amd64, %d rounds%s\n\n", len(crane), far)
	fmt.Printf("Load average (1, 5, 15 min) at the start and after each round: %s\n\n", strings.Join(loads, "; "))
	fmt.Println("| | median | min – max | requests | ÷ crane (paired median) |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, v := range variants {
		x := samples[v.key]
		r := ""
		if v.key != "crane" {
			r = fmt.Sprintf("%.2f×", pairedRatio(x, crane))
		}
		fmt.Printf("| %s | %.0f ms | %.0f–%.0f ms | %.0f | %s |\n", v.title, x.wall()*1000, x.minWall()*1000, x.maxWall()*1000,
			x.requests(), r)
	}
	fmt.Printf("\nThis build ÷ the build before (paired median): default attachments %.2f×, `--sbom none` %.2f×\n",
		pairedRatio(samples["now"], samples["before"]), pairedRatio(samples["now-none"], samples["before-none"]))
}

// pairedRatio is the median of a[i]/b[i].
func pairedRatio(a, b series) float64 {
	var r []float64
	for i := range min(len(a), len(b)) {
		r = append(r, a[i].wall.Seconds()/b[i].wall.Seconds())
	}
	return median(r)
}

// loadAverage is /proc/loadavg's first three figures.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// writeTimeline writes the requests in the order they came, with their times from the first
// one's.
func writeTimeline(file string, requests []harness.PacedRequest) {
	if len(requests) == 0 {
		return
	}
	var sb strings.Builder
	for _, r := range requests {
		fmt.Fprintf(&sb, "%7.1f %7.1f  %s %s\n", ms(r.Arrived.Sub(requests[0].Arrived)), ms(r.Answered.Sub(requests[0].Arrived)), r.Method, r.Path)
	}
	_ = os.WriteFile(file, []byte(sb.String()), 0o644)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
