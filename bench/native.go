package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Item 8 (issue 23): testdata/apps/native (one component whose dependencies are a package with a
// binding.gyp and a package with a postinstall) for linux/amd64 + linux/arm64 on the Debian bases
// of testdata/bases (Debian's node 18, npm 10, python3, make, g++; arm64 under QEMU), against
// buildah running the 289 dependencies Dockerfile (npm i inside the base, under QEMU for arm64)
// and composition Dockerfile: the first push, a one-line code change and no change. Its
// build.run lines are left out (buildah's peer script has no RUN of them), so that both sides do
// the same work: the addon compiled and the postinstall run for each platform. It also says how
// long the work inside the bases took: toa-push's processes under strace in one more first push,
// buildah's dependencies builds from their logs.

var nativeScenarios = []struct{ key, title string }{
	{"first", "first push"},
	{"code", "one-line code change"},
	{"nochange", "no change"},
}

var nativePlatforms = []string{"linux/amd64", "linux/arm64"}

func (b *bench) native() error {
	base := harness.PushDebianBase(b.t, b.addr)
	tools := []string{"toa-push"}
	// buildah's first push starts with the bases in its storage; what pulling them there costs
	// is timed, so that toa-push's cold push (which unpacks them) has a cold figure beside it.
	var buildahPull time.Duration
	if _, err := os.Stat("/proc/sys/fs/binfmt_misc/qemu-aarch64"); err == nil && b.peers {
		var err error
		if buildahPull, err = b.buildahPull(base, nativePlatforms); err != nil {
			return err
		}
		tools = append(tools, "buildah")
	}
	rows := map[string]map[string]sample{}
	depsBuild := map[string]float64{} // buildah: seconds of its dependencies builds, by scenario
	for i, tool := range tools {
		app, cache, work, err := b.nativeApp(fmt.Sprintf("native%d", i), base)
		if err != nil {
			return err
		}
		rows[tool] = map[string]sample{}
		for _, sc := range nativeScenarios {
			if sc.key == "code" {
				if err := appendLine(filepath.Join(app, "components", "native.addon", "load.js")); err != nil {
					return err
				}
			}
			fmt.Fprintf(os.Stderr, "bench: native, %s, %s\n", tool, sc.title)
			log := fmt.Sprintf("native%d-%s", i, sc.key)
			var s sample
			if tool == "toa-push" {
				s, err = b.measure(app, []string{"TOA_CACHE=" + cache}, log,
					"nice", b.toaPush, "-o", "json", "--sbom", "none", "--path", app, "-k", filepath.Join(work, "deployment"))
			} else {
				args := []string{"nice", "bash", filepath.Join(b.repo, "bench", "peer", "buildah-push.sh"), app, strings.Join(nativePlatforms, ",")}
				if sc.key == "first" {
					args = append(args, "--no-cache")
				}
				scratch := filepath.Join(work, sc.key)
				s, err = b.measure(app, []string{"BUILDAH=" + strings.Join(b.buildah, " "), "TOA_PUSH=" + b.toaPush,
					"WORK=" + scratch, "LOCAL_PACKAGES=packages", "DEPS_ENV=npm_config_nodedir=/usr"}, log, args...)
				depsBuild[sc.key] = logSpan(filepath.Join(scratch, "deps-composition-addon.log"))
			}
			if err != nil {
				return err
			}
			rows[tool][sc.key] = s
		}
	}
	// one more first push of toa-push with the bases already unpacked (by native0's pushes), as
	// buildah's storage has the base: the work in the bases alone
	app, cache, work, err := b.nativeApp("native-warm", base)
	if err != nil {
		return err
	}
	// and what toa-push learnt of them (their libc), as buildah knows its stored base
	for _, known := range []string{"bases", "libc"} {
		if err := os.Symlink(filepath.Join(b.work, "native0", "cache", known), filepath.Join(cache, known)); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: native, toa-push, first push with the bases unpacked\n")
	warm, err := b.measure(app, []string{"TOA_CACHE=" + cache}, "native-warm",
		"nice", b.toaPush, "-o", "json", "--sbom", "none", "--path", app, "-k", filepath.Join(work, "deployment"))
	if err != nil {
		return err
	}
	// one more first push of toa-push, cold, under strace: what ran in the bases and how long
	app, cache, work, err = b.nativeApp("native-strace", base)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: native, toa-push, first push under strace\n")
	lines, err := b.timeline(app, []string{"TOA_CACHE=" + cache}, "native-strace",
		b.toaPush, "-o", "json", "--sbom", "none", "--path", app, "-k", filepath.Join(work, "deployment"))
	if err != nil {
		lines = []string{"strace: " + err.Error()}
	}

	fmt.Printf("\n### 8. testdata/apps/native: one native addon and one postinstall, linux/amd64 + linux/arm64 on the Debian bases\n\n")
	fmt.Printf("bench/native.go pushes testdata/apps/native (one component; its dependencies: a local package with a binding.gyp, " +
		"compiled by node-gyp at install, and one whose postinstall writes a file) for linux/amd64 and linux/arm64 on the Debian bases of " +
		"testdata/bases (Debian's node 18, another major than the runner's, with npm 10, python3, make and g++; arm64 runs under QEMU user " +
		"emulation through binfmt_misc). Its build.run lines are left out: the 289 peer script runs none. toa-push (`--sbom none`, as buildah " +
		"attaches nothing) installs on the runner and runs the install scripts of the packages that have them inside each platform's base (through the base npm's @npmcli/run-script), the platforms at once; buildah runs " +
		"the 289 dependencies Dockerfile (`npm i --omit=dev` inside the base, `npm_config_nodedir=/usr` so node-gyp needs no download, " +
		"the local packages copied in where the lockfile's `file:` paths lead), under QEMU for arm64, then the composition Dockerfile. " +
		"The layer cache cold on the first push, buildah --no-cache, the base pulled beforehand. One run each. buildah is left out " +
		"where qemu-aarch64 is not registered with binfmt_misc.\n\n")
	fmt.Println("| change | toa-push | buildah | buildah ÷ toa-push | requests (toa-push / buildah) | sent (toa-push / buildah) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, sc := range nativeScenarios {
		t, p := rows["toa-push"][sc.key], rows["buildah"][sc.key]
		peer, r, preq, psent := "–", "–", "–", "–"
		if _, ok := rows["buildah"]; ok {
			peer, r = secs(p.wall.Seconds()), ratio(p.wall.Seconds(), t.wall.Seconds())
			preq, psent = strconv.Itoa(p.requests), size(float64(p.sent))
		}
		fmt.Printf("| %s | %s | %s | %s | %d / %s | %s / %s |\n", sc.title, secs(t.wall.Seconds()), peer, r,
			t.requests, preq, size(float64(t.sent)), psent)
	}
	fmt.Printf("| first push, the bases unpacked before (toa-push's cache of them warm: unpacked, their libc known, as buildah's storage has the base) | %s | | | %d | %s |\n",
		secs(warm.wall.Seconds()), warm.requests, size(float64(warm.sent)))
	fmt.Println()
	if p, ok := rows["buildah"]; ok {
		t := rows["toa-push"]
		// the first push compared where both tools start from the same place: neither has the
		// bases (a fresh runner: toa-push unpacks them, buildah pulls them into its storage), or
		// both have them (a runner that keeps its cache: unpacked, in buildah's storage)
		cold := p["first"].wall.Seconds() + buildahPull.Seconds()
		x := t["first"].wall.Seconds() / cold
		fmt.Printf("- First push, neither tool with the bases (toa-push unpacks them; buildah's pull of them into its emptied storage took %s, "+
			"its first push from nothing %s): %.2f× buildah's time (target ≤ 0.5×): %s.\n",
			secs(buildahPull.Seconds()), secs(cold), x, verdict(x <= 0.5))
		x = warm.wall.Seconds() / p["first"].wall.Seconds()
		fmt.Printf("- First push, both with the bases (toa-push's unpacked, buildah's in its storage): %.2f× buildah's time (target ≤ 0.5×): %s.\n",
			x, verdict(x <= 0.5))
		x = t["first"].wall.Seconds() / p["first"].wall.Seconds()
		fmt.Printf("- Across the two (toa-push without the bases, buildah with them, the table's first row): %.2f× buildah's time.\n", x)
		fmt.Printf("- buildah's dependencies image (npm i for both platforms, arm64 under QEMU), from its build log: %s on the first push, "+
			"%s on the code change, %s with no change (0: not built).\n", secs(depsBuild["first"]), secs(depsBuild["code"]), secs(depsBuild["nochange"]))
	}
	fmt.Printf("- toa-push's code change and no-change push: %s and %s.\n",
		secs(rows["toa-push"]["code"].wall.Seconds()), secs(rows["toa-push"]["nochange"].wall.Seconds()))
	fmt.Printf("\nWhat toa-push ran in one more first push with a cold cache, under strace (`strace -f -e trace=execve,exit_group`, which slows " +
		"each process; the processes that took 0.2 s or more, and every npm, node-gyp and compiler):\n\n```\n")
	for i, l := range lines {
		if i == 0 || keepTimelineLine(l) {
			fmt.Println(l)
		}
	}
	fmt.Printf("```\n")
	return nil
}

// nativeApp copies testdata/apps/native for one tool: the context for this registry and the
// Debian base, without build.run; the extension packages linked; a cold layer cache.
func (b *bench) nativeApp(ns, base string) (app, cache, work string, err error) {
	src := filepath.Join(b.repo, "testdata", "apps", "native")
	app, cache, work = filepath.Join(b.work, ns, "app"), filepath.Join(b.work, ns, "cache"), filepath.Join(b.work, ns, "work")
	err = copyTree(src, app, map[string]func([]byte) []byte{
		"context.toa.yaml": func(data []byte) []byte { return withoutRun(b.context(data, ns, nativePlatforms, base)) },
	})
	if err != nil {
		return "", "", "", err
	}
	if err := declareGypScript(app); err != nil {
		return "", "", "", err
	}
	links := filepath.Join(src, "node_modules", "@toa.io")
	entries, err := os.ReadDir(links)
	if err != nil {
		return "", "", "", err
	}
	dir := filepath.Join(app, "node_modules", "@toa.io")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", err
	}
	for _, e := range entries {
		target, err := filepath.EvalSymlinks(filepath.Join(links, e.Name()))
		if err != nil {
			return "", "", "", err
		}
		if err := os.Symlink(target, filepath.Join(dir, e.Name())); err != nil {
			return "", "", "", err
		}
	}
	for _, d := range []string{cache, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", "", err
		}
	}
	return app, cache, work, nil
}

// declareGypScript gives the addon package the install script npm's publish gives a package with
// a binding.gyp ("node-gyp rebuild"), and the lockfile its hasInstallScript: read from a local
// folder, npm does not add it, and npm i in buildah's RUN would then build no addon at all
// (toa-push finds the binding.gyp itself). Both tools install the same files.
func declareGypScript(app string) error {
	edits := []struct{ file, old, new string }{
		{filepath.Join(app, "packages", "native", "package.json"), `"main": "index.js",`,
			`"main": "index.js",` + "\n" + `  "scripts": { "install": "node-gyp rebuild" },`},
		{filepath.Join(app, "components", "native.addon", "package-lock.json"), `"name": "toa-test-native",` + "\n" + `      "version": "1.0.0",`,
			`"name": "toa-test-native",` + "\n" + `      "version": "1.0.0",` + "\n" + `      "hasInstallScript": true,`},
	}
	for _, e := range edits {
		data, err := os.ReadFile(e.file)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), e.old) {
			return fmt.Errorf("%s: no %q to declare the addon's install script after", e.file, e.old)
		}
		if err := os.WriteFile(e.file, []byte(strings.Replace(string(data), e.old, e.new, 1)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// withoutRun drops registry.build.run (a block scalar) from a context.
func withoutRun(data []byte) []byte {
	var out []string
	indent := -1
	for _, line := range strings.Split(string(data), "\n") {
		n := len(line) - len(strings.TrimLeft(line, " "))
		if indent >= 0 && (n > indent || strings.TrimSpace(line) == "") {
			continue
		}
		indent = -1
		if strings.HasPrefix(strings.TrimSpace(line), "run:") {
			indent = n
			continue
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}

func appendLine(file string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString("// a one-line change\n")
	return err
}

// logSpan is the seconds from the first to the last line of a log whose lines start with their
// time (buildah-push.sh's): 0 when there is no such log.
func logSpan(file string) float64 {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	var first, last float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		t, err := strconv.ParseFloat(strings.SplitN(sc.Text(), " ", 2)[0], 64)
		if err != nil {
			continue
		}
		if first == 0 {
			first = t
		}
		last = t
	}
	return last - first
}

// keepTimelineLine keeps a timeline's lines worth reading: long processes and the install's own.
func keepTimelineLine(l string) bool {
	f := strings.Fields(l)
	if len(f) < 3 {
		return false
	}
	if took, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "s"), 64); err == nil && took >= 0.2 {
		return true
	}
	for _, w := range []string{"npm", "node-gyp", "gyp", "cc1", "g++", "gcc", "make", "qemu", "end"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// buildahPull empties buildah's storage of all but item 1's base (bases/debian-node:bench),
// this item's bases pulled by earlier runs from registries at other ports too (their layers would
// make the pull a look-up), and pulls base for the platforms: how long the pull took.
func (b *bench) buildahPull(base string, platforms []string) (time.Duration, error) {
	item1 := strings.Split(debianBase, ":")
	b.emptyBuildah(func(name, tag string) bool {
		return strings.HasSuffix(name, "/"+item1[0]) && tag == item1[1]
	})
	saved, savedPlatforms := b.debian, b.debianPlatforms
	defer func() { b.debian, b.debianPlatforms = saved, savedPlatforms }()
	b.debian, b.debianPlatforms = base, platforms
	start := time.Now()
	err := b.pullBuildah()
	return time.Since(start), err
}
