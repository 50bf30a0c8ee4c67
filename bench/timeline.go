package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// timeline runs argv under strace and returns the processes it started, each with when it
// started and how long it ran, from the command's start: where the time of a short toa-push goes
// when it is not spent on the registry. strace slows every process down a little.
func (b *bench) timeline(dir string, env []string, logName string, argv ...string) ([]string, error) {
	if _, err := exec.LookPath("strace"); err != nil {
		return nil, fmt.Errorf("no strace: %w", err)
	}
	trace := filepath.Join(b.work, logName+".strace")
	args := append([]string{"-f", "-tt", "-e", "trace=execve,exit_group", "-o", trace}, argv...)
	if _, err := b.measure(dir, env, logName, append([]string{"strace"}, args...)...); err != nil {
		return nil, err
	}
	f, err := os.Open(trace)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line := regexp.MustCompile(`^(\d+)\s+(\d\d:\d\d:\d\d\.\d+) (.*)$`)
	type proc struct {
		start, end time.Time
		what       string
	}
	procs := map[string]*proc{}
	var order []string
	var first, last time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		t, err := time.Parse("15:04:05.000000", m[2])
		if err != nil {
			continue
		}
		if first.IsZero() {
			first = t
		}
		last = t
		pid, rest := m[1], m[3]
		switch {
		case strings.HasPrefix(rest, "execve(") && !strings.Contains(rest, "= -1"):
			what := rest[len("execve("):]
			if i := strings.Index(what, "], "); i >= 0 {
				what = what[:i+1]
			}
			if j := strings.Index(what, ", ["); j >= 0 {
				what = what[j+2:]
			}
			if len(what) > 90 {
				what = what[:87] + "..."
			}
			if p, ok := procs[pid]; ok {
				p.what = what // a script's interpreter: the same process
				continue
			}
			procs[pid] = &proc{start: t, what: what}
			order = append(order, pid)
		case strings.HasPrefix(rest, "exit_group("):
			if p, ok := procs[pid]; ok {
				p.end = t
			}
		}
	}
	out := []string{fmt.Sprintf("%-8s %-8s %s", "start", "took", "process")}
	for _, pid := range order {
		p := procs[pid]
		if p.end.IsZero() {
			p.end = last
		}
		out = append(out, fmt.Sprintf("%-8s %-8s %s", fmt.Sprintf("+%.2fs", p.start.Sub(first).Seconds()),
			fmt.Sprintf("%.2fs", p.end.Sub(p.start).Seconds()), p.what))
	}
	out = append(out, fmt.Sprintf("%-8s %-8s %s", fmt.Sprintf("+%.2fs", last.Sub(first).Seconds()), "", "end"))
	return out, nil
}
