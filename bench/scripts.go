package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Item 11 (issue 36): bench/apps/scripts (one component whose real packages have install scripts:
// esbuild, core-js, protobufjs, bufferutil, beside express) for the runner's own platform, libc and
// Node major (the harness's runner base: Debian with the runner's node and npm), pushed the way
// toa-push did before 2026-12 (--scripts-on-runner: npm runs the scripts on the runner) and the
// way it does now (every script inside the base): the first push with a cold cache, again with
// the base already unpacked (the cost of the unpack set apart), a one-package bump (ms 2.1.2 →
// 2.1.3, which has no script), a one-line code change and no change. npm's cache warm for both, as
// a runner that keeps it.

var scriptScenarios = []struct{ key, title string }{
	{"first", "first push, cold cache"},
	{"bump", "one-package bump (ms 2.1.2 → 2.1.3)"},
	{"code", "one-line code change"},
	{"nochange", "no change"},
}

func (b *bench) scripts() error {
	base := harness.PushRunnerBase(b.t, b.addr)
	ways := []struct{ name, flag string }{{"scripts on the runner (before)", "--scripts-on-runner"}, {"scripts in the base (now)", ""}}
	rows := map[string]map[string]sample{}
	var warm sample
	for i, way := range ways {
		rows[way.name] = map[string]sample{}
		for run := 0; run < 2; run++ { // the second run of the first push finds the base unpacked
			ns := fmt.Sprintf("scripts-w%d-r%d", i, run)
			app, cache, work, err := b.scriptsApp(ns, base)
			if err != nil {
				return err
			}
			if run == 1 {
				if way.flag != "" {
					break
				}
				// the bases the first run unpacked, and what it learnt of them
				for _, known := range []string{"bases", "libc"} {
					if err := os.Symlink(filepath.Join(b.work, fmt.Sprintf("scripts-w%d-r0", i), "cache", known), filepath.Join(cache, known)); err != nil {
						return err
					}
				}
				fmt.Fprintf(os.Stderr, "bench: scripts, %s, first push with the base unpacked\n", way.name)
				if warm, err = b.pushScripts(app, cache, work, way.flag, ns+"-warm"); err != nil {
					return err
				}
				break
			}
			for _, sc := range scriptScenarios {
				if err := b.changeScripts(app, sc.key); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "bench: scripts, %s, %s\n", way.name, sc.title)
				s, err := b.pushScripts(app, cache, work, way.flag, ns+"-"+sc.key)
				if err != nil {
					return err
				}
				rows[way.name][sc.key] = s
			}
		}
	}
	before, now := rows[ways[0].name], rows[ways[1].name]
	fmt.Printf("\n### 11. bench/apps/scripts: install scripts on the runner's own target, on the runner (before) and in the base (now)\n\n")
	fmt.Printf("bench/scripts.go pushes bench/apps/scripts (one component: esbuild, core-js, protobufjs and bufferutil, which have install " +
		"scripts, beside express) for linux/amd64 on the harness's runner base (Debian with this runner's node, npm and headers: the target is " +
		"the runner), `--sbom none`, npm's cache warm. _Before_ is `--scripts-on-runner`, toa-push's way until 2026-12 (npm runs the scripts " +
		"on the runner); _now_ runs every install script inside the base's sandbox. One run each.\n\n")
	fmt.Println("| change | before | now | now − before |")
	fmt.Println("|---|---:|---:|---:|")
	for _, sc := range scriptScenarios {
		fmt.Printf("| %s | %s | %s | %s |\n", sc.title, secs(before[sc.key].wall.Seconds()), secs(now[sc.key].wall.Seconds()),
			secs(now[sc.key].wall.Seconds()-before[sc.key].wall.Seconds()))
	}
	fmt.Printf("| first push, the base unpacked before | | %s | %s |\n", secs(warm.wall.Seconds()), secs(warm.wall.Seconds()-before["first"].wall.Seconds()))
	fmt.Println()
	unpack := now["first"].wall.Seconds() - warm.wall.Seconds()
	extra := warm.wall.Seconds() - before["first"].wall.Seconds()
	fmt.Printf("- The base's first unpack (cached after): %s. With it set apart, the first push takes %s more than before: %.0f%% of "+
		"before's whole first push (target: at most 30%% of the install's time): %s.\n", secs(unpack), secs(extra),
		100*extra/before["first"].wall.Seconds(), verdict(extra <= 0.3*before["first"].wall.Seconds()))
	x := now["bump"].wall.Seconds() - before["bump"].wall.Seconds()
	fmt.Printf("- The bump takes %s more than before (%.0f%% of before's bump; target ≤ 30%%): %s.\n", secs(x),
		100*x/before["bump"].wall.Seconds(), verdict(x <= 0.3*before["bump"].wall.Seconds()))
	fmt.Printf("- The code change and the no-change push, before and now: %s and %s, %s and %s (nothing runs in a base).\n",
		secs(before["code"].wall.Seconds()), secs(now["code"].wall.Seconds()), secs(before["nochange"].wall.Seconds()), secs(now["nochange"].wall.Seconds()))
	return nil
}

// pushScripts runs one push of bench/apps/scripts.
func (b *bench) pushScripts(app, cache, work, flag, log string) (sample, error) {
	args := []string{"nice", b.toaPush, "-o", "json", "--sbom", "none", "--path", app, "-k", filepath.Join(work, "deployment")}
	if flag != "" {
		args = append(args, flag)
	}
	return b.measure(app, []string{"TOA_CACHE=" + cache}, log, args...)
}

// scriptsApp copies bench/apps/scripts for one run: the context for this registry and the runner
// base, the extension packages linked, a cold layer cache with npm's warm one.
func (b *bench) scriptsApp(ns, base string) (app, cache, work string, err error) {
	app, cache, work = filepath.Join(b.work, ns, "app"), filepath.Join(b.work, ns, "cache"), filepath.Join(b.work, ns, "work")
	err = copyTree(filepath.Join(b.repo, "bench", "apps", "scripts"), app, map[string]func([]byte) []byte{
		"context.toa.yaml": func(data []byte) []byte { return b.context(data, ns, []string{"linux/amd64"}, base) },
	})
	if err != nil {
		return "", "", "", err
	}
	if err := b.linkExtensions(app); err != nil {
		return "", "", "", err
	}
	for _, d := range []string{cache, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", "", err
		}
	}
	return app, cache, work, os.Symlink(b.npmCache, filepath.Join(cache, "npm"))
}

// changeScripts makes the scenario's change in bench/apps/scripts.
func (b *bench) changeScripts(app, scenario string) error {
	switch scenario {
	case "bump":
		for _, f := range []string{"package.json", "package-lock.json"} {
			data, err := os.ReadFile(filepath.Join(b.repo, "bench", "apps", "changes", "scripts.app", f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(app, "components", "scripts.app", f), data, 0o644); err != nil {
				return err
			}
		}
	case "code":
		return appendLine(filepath.Join(app, "components", "scripts.app", "load.js"))
	}
	return nil
}
