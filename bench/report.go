package main

import (
	"fmt"
	"strings"
)

func (b *bench) printPushes(sets []*pushSet) {
	fmt.Printf("\n### 1. Push of bench/apps/shop (3 compositions, 4 components) to the local registry\n\n")
	fmt.Printf("toa-push against buildah building the 289 tool's two Dockerfiles (bench/peer/buildah-push.sh: " +
		"probe every image, build and push the missing dependencies images, then the compositions, three at a time), " +
		"both on the same base (Debian minbase + node + npm, bench/rootfs.sh). Each run pushes to a namespace of its own; " +
		"a first push starts with toa-push's layer cache empty and buildah --no-cache, both with npm's cache warm and the base known. " +
		"crane: `crane append` of the sources layer toa-push wrote, onto the same dependencies image, per platform, then `crane index append`. " +
		"toa-push runs with `--sbom none` in the table, as buildah and crane attach nothing; what its default attachments cost is said below each table. " +
		"Bytes are request bodies as the recording proxy counted them.\n")
	for _, set := range sets {
		toaRuns := len(set.samples["first"]["toa-push"])
		peerRuns := len(set.samples["first"]["buildah"])
		fmt.Printf("\n#### %s (toa-push: %d runs, buildah: %d runs)\n\n", strings.Join(set.platforms, " + "), toaRuns, peerRuns)
		if peerRuns == 0 {
			fmt.Printf("buildah not measured for these platforms: %s\n\n", b.peerMultiReason())
		}
		fmt.Println("| scenario | toa-push | buildah | buildah ÷ toa-push | crane append | toa-push ÷ crane | requests (toa-push / buildah / crane) | sent (toa-push / buildah / crane) |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, sc := range scenarios {
			t, p, c := set.samples[sc.key]["toa-push"], set.samples[sc.key]["buildah"], set.samples[sc.key]["crane"]
			cell := func(s series, f func(series) string) string {
				if len(s) == 0 {
					return "–"
				}
				return f(s)
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s |\n", sc.title,
				cell(t, func(s series) string { return secs(s.wall()) }),
				cell(p, func(s series) string { return secs(s.wall()) }),
				cell(p, func(s series) string { return ratio(s.wall(), t.wall()) }),
				cell(c, func(s series) string { return secs(s.wall()) }),
				cell(c, func(s series) string { return ratio(t.wall(), s.wall()) }),
				cell(t, func(s series) string { return fmt.Sprintf("%.0f", s.requests()) }),
				cell(p, func(s series) string { return fmt.Sprintf("%.0f", s.requests()) }),
				cell(c, func(s series) string { return fmt.Sprintf("%.0f", s.requests()) }),
				cell(t, func(s series) string { return size(s.sent()) }),
				cell(p, func(s series) string { return size(s.sent()) }),
				cell(c, func(s series) string { return size(s.sent()) }))
		}
		code := set.samples["code"]
		fmt.Println()
		if p := code["buildah"]; len(p) > 0 {
			r := p.wall() / code["toa-push"].wall()
			fmt.Printf("- Code change, toa-push against buildah: %.1f× faster (target ≥ 5×): %s.\n", r, verdict(r >= 5))
		}
		if c := code["crane"]; len(c) > 0 {
			r := code["toa-push"].wall() / c.wall()
			fmt.Printf("- Code change, toa-push against crane append: %.2f× crane's time (target ≤ 1.5×): %s.\n", r, verdict(r <= 1.5))
		}
		if len(set.minimal) > 0 {
			sent, min := code["toa-push"].sent(), set.minimal.sent()
			fmt.Printf("- Code change, bytes: toa-push sent %s; the new layer, configs, manifests and index are %s: %.2f× (target ≤ 1.1×): %s.\n",
				size(sent), size(min), sent/min, verdict(sent <= 1.1*min))
		}
		if a := set.attested; len(a) > 0 {
			fmt.Printf("- Code change with toa-push's default attachments (an SPDX SBOM per platform, a referrer of its image and of the index, and SLSA provenance): "+
				"%s, %.0f requests, %s sent (%d runs).\n", secs(a.wall()), a.requests(), size(a.sent()), len(a))
			if c := code["crane"]; len(c) > 0 {
				r := a.wall() / c.wall()
				fmt.Printf("- Code change with the default attachments against crane append: %.2f× crane's time (target ≤ 1.5×, issue 38): %s.\n", r, verdict(r <= 1.5))
			}
		}
		if nc := set.samples["nochange"]["toa-push"]; len(nc) > 0 {
			heads, pings, resolve, other := 0, 0, 0, 0
			for _, r := range nc[len(nc)-1].log {
				switch {
				case r.Path == "/v2/":
					pings++
				case strings.Contains(r.Path, "/bases/"):
					resolve++
				case r.Method == "HEAD" && strings.Contains(r.Path, "/manifests/"):
					heads++
				default:
					other++
				}
			}
			fmt.Printf("- No-change push: %d HEADs for 3 images, %d request(s) to resolve the one base, %d other, and %d `GET /v2/` pings where one would do "+
				"(target: one resolve per distinct base and one HEAD per image, nothing else): %s.\n",
				heads, resolve, other, pings, verdict(heads == 3 && other == 0 && pings <= 1))
		}
		if len(set.profile) > 0 {
			fmt.Printf("\nWhere a code-change push's time goes: the processes toa-push started in one more code-change push, under strace "+
				"(`strace -f -e trace=execve,exit_group`; strace slows each process a little):\n\n```\n%s\n```\n", strings.Join(set.profile, "\n"))
		}
		for _, key := range []string{"nochange", "code"} {
			if lines := set.logs[key]; len(lines) > 0 {
				title := map[string]string{"nochange": "no-change push", "code": "code-change push"}[key]
				fmt.Printf("\ntoa-push's requests, %s (last run; count × method, path, status):\n\n```\n%s\n```\n", title, strings.Join(lines, "\n"))
			}
		}
	}
}

func (b *bench) peerMultiReason() string {
	if !b.peers {
		return "-peers=false"
	}
	if !b.peerArm64 {
		return "its arm64 RUN needs qemu-user-static registered with binfmt_misc, which this machine did not have (see testdata/bench.sh's output)"
	}
	return "BENCH_PEER_MULTI_RUNS=0"
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}
