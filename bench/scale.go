package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Item 3: an application of 50 compositions for three platforms: the no-change push and the plan.

const scaleCompositions = 50

// scaleApp writes an application of 50 components, each its own (derived) composition, for
// linux/amd64, linux/arm/v7 and linux/arm64 on the three-platform test base.
func (b *bench) scaleApp(dir, base string) error {
	return b.manyCompositions(dir, "scale", base, scaleCompositions)
}

// manyCompositions writes an application named name of n components without dependencies, each
// its own (derived) composition, for three platforms on base, pushed to the bench's registry.
func (b *bench) manyCompositions(dir, name, base string, n int) error {
	ctx := fmt.Sprintf(`name: %s
runtime: 1.0.0-alpha.289
registry:
  base: %s
  platforms: [linux/amd64, linux/arm/v7, linux/arm64]
  build:
    image: %s
resources:
  cpu: [100m, 500m]
  memory: [128Mi, 256Mi]
amqp: amqp://rabbitmq
`, name, b.addr, base)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "context.toa.yaml"), []byte(ctx), 0o644); err != nil {
		return err
	}
	if err := b.linkExtensions(dir); err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		c := filepath.Join(dir, "components", fmt.Sprintf("%s.c%02d", name, i))
		if err := os.MkdirAll(c, 0o755); err != nil {
			return err
		}
		manifest := fmt.Sprintf("operations:\n  get%02d:\n    output: integer\n", i)
		code := fmt.Sprintf("'use strict'\n\nexports.get%02d = async () => %d\n", i, i)
		if err := os.WriteFile(filepath.Join(c, "manifest.toa.yaml"), []byte(manifest), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c, "operations.js"), []byte(code), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) scale() error {
	base, err := pushThreePlatformBase(b.addr)
	if err != nil {
		return err
	}
	dir := filepath.Join(b.work, "scale")
	app := filepath.Join(dir, "app")
	if err := b.scaleApp(app, base); err != nil {
		return err
	}
	cache := filepath.Join(dir, "cache")
	os.MkdirAll(cache, 0o755)
	os.Symlink(b.npmCache, filepath.Join(cache, "npm"))
	env := []string{"TOA_CACHE=" + cache}
	push := []string{b.toaPush, "-o", "json", "--path", app, "-k", filepath.Join(dir, "deployment")}
	plan := []string{b.toaPush, "--plan", "-o", "json", "--path", app, "-k", filepath.Join(dir, "plan")}
	fmt.Fprintf(os.Stderr, "bench: scale, the first push of %d compositions × 3 platforms\n", scaleCompositions)
	first, err := b.measure(app, env, "scale-first", push...)
	if err != nil {
		return err
	}
	out, err := parsePush(first.stdout)
	if err != nil {
		return err
	}
	if len(out.Images) != scaleCompositions {
		return fmt.Errorf("the scale application has %d images, not %d", len(out.Images), scaleCompositions)
	}
	var pushes, plans, npmV, nodeV series
	var lastLog []string
	for run := 1; run <= b.runs; run++ {
		order := []string{"push", "plan"}
		if run%2 == 0 {
			order = []string{"plan", "push"}
		}
		for _, what := range order {
			fmt.Fprintf(os.Stderr, "bench: scale, %s, run %d\n", what, run)
			switch what {
			case "push":
				s, err := b.measure(app, env, fmt.Sprintf("scale-push-%d", run), push...)
				if err != nil {
					return err
				}
				if o, err := parsePush(s.stdout); err != nil {
					return err
				} else {
					for _, img := range o.Images {
						if img.Built {
							return fmt.Errorf("the no-change push built %s", img.Name)
						}
					}
				}
				pushes = append(pushes, s)
				var buf bytes.Buffer
				requestLog(&buf, s.log)
				lastLog = strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
			case "plan":
				s, err := b.measure(app, env, fmt.Sprintf("scale-plan-%d", run), plan...)
				if err != nil {
					return err
				}
				plans = append(plans, s)
			}
		}
		// what asking node and npm would cost each run (toa-push keeps their answers in its cache)
		for _, tool := range []string{"npm", "node"} {
			start := time.Now()
			if err := exec.Command(tool, "--version").Run(); err != nil {
				return err
			}
			s := sample{wall: time.Since(start)}
			if tool == "npm" {
				npmV = append(npmV, s)
			} else {
				nodeV = append(nodeV, s)
			}
		}
	}
	profile, err := b.timeline(app, env, "scale-plan-strace", plan...)
	if err != nil {
		profile = []string{"strace: " + err.Error()}
	}
	fmt.Printf("\n### 3. Scale: %d compositions × 3 platforms (linux/amd64, linux/arm/v7, linux/arm64)\n\n", scaleCompositions)
	fmt.Printf("bench/scale.go writes the application (50 components, each its own derived composition, no dependencies) on the test base "+
		"of internal/harness with a third entry, linux/arm/v7, that reuses the arm64 layers. The first push (not in the table: %s, %d requests) "+
		"puts every image in the registry; then the no-change push and `--plan` alone, %d runs each, alternating.\n\n",
		secs(first.wall.Seconds()), first.requests, b.runs)
	fmt.Println("| command | median | min | max | requests | sent |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	fmt.Printf("| toa-push (no change) | %s | %s | %s | %.0f | %s |\n", secs(pushes.wall()), secs(pushes.minWall()), secs(pushes.maxWall()), pushes.requests(), size(pushes.sent()))
	fmt.Printf("| toa-push --plan | %s | %s | %s | %.0f | %s |\n", secs(plans.wall()), secs(plans.minWall()), secs(plans.maxWall()), plans.requests(), size(plans.sent()))
	fmt.Printf("| for scale: `npm --version` alone | %s | %s | %s | | |\n", secs(npmV.wall()), secs(npmV.minWall()), secs(npmV.maxWall()))
	fmt.Printf("| for scale: `node --version` alone | %s | %s | %s | | |\n", secs(nodeV.wall()), secs(nodeV.minWall()), secs(nodeV.maxWall()))
	fmt.Printf("\n- No-change push of 50 compositions × 3 platforms under 1 s: %s (target < 1 s): %s.\n", secs(pushes.wall()), verdict(pushes.wall() < 1))
	fmt.Printf("- `--plan` alone under 1 s: %s (target < 1 s): %s.\n", secs(plans.wall()), verdict(plans.wall() < 1))
	heads, pings, resolve, other := 0, 0, 0, 0
	for _, r := range pushes[len(pushes)-1].log {
		switch {
		case r.Method == "HEAD" && strings.Contains(r.Path, "/scale/"):
			heads++
		case r.Path == "/v2/":
			pings++
		case strings.Contains(r.Path, "/bases/"):
			resolve++
		default:
			other++
		}
	}
	fmt.Printf("- Requests of the no-change push: %d HEADs of the application's images (one per image: %d), %d of the base's resolve, "+
		"%d other requests, and %d `GET /v2/` pings, where one would do: %d requests where %d would do: %s.\n",
		heads, scaleCompositions, resolve, other, pings, heads+resolve+other+pings, scaleCompositions+resolve+1,
		verdict(heads == scaleCompositions && other == 0 && pings <= 1))
	fmt.Printf("\nWhere `--plan`'s time goes: the processes toa-push started, under strace (`strace -f -e trace=execve,exit_group`):\n\n```\n%s\n```\n", strings.Join(profile, "\n"))
	fmt.Printf("\ntoa-push's requests, no-change push of 50 compositions (last run):\n\n```\n%s\n```\n", strings.Join(lastLog, "\n"))
	return b.scaleLarger(base)
}

// scaleLarger is item 3 at 300 and 1,000 compositions (issue 38): the first push once, then the
// no-change push and --plan, three runs each.
func (b *bench) scaleLarger(base string) error {
	type row struct {
		n             int
		first         sample
		pushes, plans series
		pushRSS       int64
	}
	var rows []row
	for _, s := range strings.Split(envOr("BENCH_SCALE_SIZES", "300,1000"), ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 {
			return fmt.Errorf("BENCH_SCALE_SIZES: %q", s)
		}
		dir := filepath.Join(b.work, fmt.Sprintf("scale-%d", n))
		app := filepath.Join(dir, "app")
		name := fmt.Sprintf("scale%d", n)
		if err := b.manyCompositions(app, name, base, n); err != nil {
			return err
		}
		cache := filepath.Join(dir, "cache")
		os.MkdirAll(cache, 0o755)
		os.Symlink(b.npmCache, filepath.Join(cache, "npm"))
		env := []string{"TOA_CACHE=" + cache}
		push := []string{b.toaPush, "-o", "json", "--path", app, "-k", filepath.Join(dir, "deployment")}
		plan := []string{b.toaPush, "--plan", "-o", "json", "--path", app, "-k", filepath.Join(dir, "plan")}
		fmt.Fprintf(os.Stderr, "bench: scale, the first push of %d compositions × 3 platforms\n", n)
		r := row{n: n}
		var err error
		if r.first, err = b.measure(app, env, fmt.Sprintf("scale-%d-first", n), push...); err != nil {
			return err
		}
		for run := 1; run <= min(b.runs, 3); run++ {
			fmt.Fprintf(os.Stderr, "bench: scale, %d compositions, run %d\n", n, run)
			s, err := b.measure(app, env, fmt.Sprintf("scale-%d-push-%d", n, run), push...)
			if err != nil {
				return err
			}
			r.pushes = append(r.pushes, s)
			if s, err = b.measure(app, env, fmt.Sprintf("scale-%d-plan-%d", n, run), plan...); err != nil {
				return err
			}
			r.plans = append(r.plans, s)
		}
		_, r.pushRSS, _, _ = b.rss(env, fmt.Sprintf("scale-%d-push-rss", n), push...)
		rows = append(rows, r)
		os.RemoveAll(cache)
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Printf("\nThe same application at more compositions (issue 38): the first push once, then the no-change push and `--plan`, %d runs each, medians; "+
		"peak RSS of a no-change push (`/usr/bin/time -v`).\n\n", min(b.runs, 3))
	fmt.Println("| compositions | first push | requests | no-change push | requests | `--plan` | requests | no-change push's peak RSS |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %d | %s | %.0f | %s | %.0f | %s |\n", r.n, secs(r.first.wall.Seconds()), r.first.requests,
			secs(r.pushes.wall()), r.pushes.requests(), secs(r.plans.wall()), r.plans.requests(), size(float64(r.pushRSS)))
	}
	return nil
}
