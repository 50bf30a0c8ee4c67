package layer

import (
	"regexp"
	"strings"
)

// Step is one step of an image's build.run, in the order Toa 289's dependencies.Dockerfile ran
// them (a RUN a line: the context's lines, then each component's): consecutive shell lines, which
// run in the base and make one layer (Run), or consecutive npm global installs, which npm on the
// runner installs for the platform and make one layer (Global). `npm config set` lines make no
// layer: they configure every npm install after them (Config), as 289's wrote the configuration
// that its later RUNs read.
type Step struct {
	Shell  []string // lines run with /bin/sh -c in the base
	Global []string // `npm i -g` lines (ParseRun reads them)
	// Config is the npm configuration of the `npm config set` lines written before this step
	// and in it: what the step's npm and every later install read.
	Config map[string]string
	// InBase is set on a Shell step that holds an `npm i -g` line, run in the base as written
	// because a shell line before it may have changed what npm installs (it names npm or its
	// configuration), which npm on the runner would not see.
	InBase bool
}

// Steps sorts build.run lines into their steps, in order. Empty lines and comments are dropped.
// A line that is an npm command ParseRun reads is an npm step; any other line is a shell line.
func Steps(lines []string) []Step {
	var steps []Step
	config := map[string]string{}
	touchesNpm := false
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		global, cfg, err := ParseRun(line)
		switch {
		case err != nil:
			touchesNpm = touchesNpm || npmWord.MatchString(line)
			steps = appendShell(steps, line)
		case len(global) == 0:
			for k, v := range cfg {
				config[k] = v
			}
			continue // configuration alone: it reaches the steps after it through Config
		case touchesNpm:
			// after a shell line that may configure npm, the install runs in the base as written
			steps = appendShell(steps, line)
			steps[len(steps)-1].InBase = true
		default:
			if n := len(steps); n > 0 && len(steps[n-1].Global) > 0 {
				steps[n-1].Global = append(steps[n-1].Global, line)
			} else {
				steps = append(steps, Step{Global: []string{line}})
			}
		}
		for k, v := range cfg {
			config[k] = v
		}
		steps[len(steps)-1].Config = copyConfig(config)
	}
	return steps
}

// npmWord is a shell line that may change what a later npm install does: it runs npm or writes
// its configuration.
var npmWord = regexp.MustCompile(`\bnpm\b|npmrc|NPM_CONFIG|npm_config`)

func appendShell(steps []Step, line string) []Step {
	if n := len(steps); n > 0 && len(steps[n-1].Shell) > 0 {
		steps[n-1].Shell = append(steps[n-1].Shell, line)
		return steps
	}
	return append(steps, Step{Shell: []string{line}})
}

func copyConfig(config map[string]string) map[string]string {
	out := make(map[string]string, len(config))
	for k, v := range config {
		out[k] = v
	}
	return out
}

// ShellLines are the lines of the steps that run in the base: CheckBase's work.
func ShellLines(steps []Step) []string {
	var lines []string
	for _, s := range steps {
		lines = append(lines, s.Shell...)
	}
	return lines
}

// NpmConfig is the configuration of every `npm config set` line of build.run: what the
// components' installs read, as 289's `npm i` in each component read what the lines before it
// set.
func NpmConfig(lines []string) map[string]string {
	config := map[string]string{}
	for _, line := range lines {
		if _, cfg, err := ParseRun(line); err == nil {
			for k, v := range cfg {
				config[k] = v
			}
		}
	}
	return config
}
