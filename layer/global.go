package layer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// runHint is the advice for a build.run line toa-push cannot run.
const runHint = "toa-push builds images without a container, so it runs only npm's global installs " +
	"(`npm i -g <package>`) and `npm config set <key> <value>`; use a base image that has what this line makes " +
	"(set registry.build.image, or the composition's image, to an image built with it)"

// ParseRun reads build.run (the context's registry.build.run and the components' build.run,
// one command a line) and returns the packages of its global installs, in order, and the npm
// configuration of its `npm config set` lines. A line may be `npm i -g <package>...`, `npm
// install --global ...`, `npm add -g ...`, `npm config set <key> <value>` (or key=value pairs),
// `npm set ...`, several of those joined by &&, a comment or empty. $NAME and ${NAME} in a config
// value become npm's ${NAME}, which npm takes from the runner's environment
// (registry.build.arguments). Any other line is a *fault.Input (key registry.build.run) naming it,
// with the advice to use a base image that has it.
func ParseRun(run string) (global []string, config map[string]string, err error) {
	config = map[string]string{}
	for _, line := range strings.Split(run, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, command := range strings.Split(line, "&&") {
			pkgs, cfg, err := parseCommand(strings.TrimSpace(command))
			if err != nil {
				return nil, nil, &fault.Input{Key: "registry.build.run", Message: fmt.Sprintf("`%s`: %s", line, err), Hint: runHint}
			}
			global = append(global, pkgs...)
			for k, v := range cfg {
				config[k] = v
			}
		}
	}
	return global, config, nil
}

// word is a word of a command line, and whether it names variables ($NAME).
type word struct {
	text     string
	variable bool
}

// words splits a command as a shell would, for the little a build.run line may hold: quotes,
// backslashes and $NAME; anything that would take a shell is refused.
func words(command string) ([]word, error) {
	var list []word
	var cur strings.Builder
	in, started, variable := byte(0), false, false
	for i := 0; i < len(command); i++ {
		c := command[i]
		switch {
		case in == '\'':
			if c == '\'' {
				in = 0
			} else {
				cur.WriteByte(c)
			}
		case in == '"':
			switch c {
			case '"':
				in = 0
			case '\\':
				if i+1 < len(command) {
					i++
					cur.WriteByte(command[i])
				}
			case '`':
				return nil, fmt.Errorf("it needs a shell")
			case '$':
				variable = true
				cur.WriteByte(c)
			default:
				cur.WriteByte(c)
			}
		case c == ' ' || c == '\t':
			if started {
				list = append(list, word{cur.String(), variable})
				cur.Reset()
				started, variable = false, false
			}
			continue
		case c == '\'' || c == '"':
			in = c
		case c == '\\':
			if i+1 < len(command) {
				i++
				cur.WriteByte(command[i])
			}
		case strings.IndexByte(";|&<>`()*?", c) >= 0:
			return nil, fmt.Errorf("it needs a shell")
		case c == '$':
			variable = true
			cur.WriteByte(c)
		default:
			cur.WriteByte(c)
		}
		started = true
	}
	if in != 0 {
		return nil, fmt.Errorf("a quote is not closed")
	}
	if started {
		list = append(list, word{cur.String(), variable})
	}
	return list, nil
}

var variableRef = regexp.MustCompile(`\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))`)

// parseCommand reads one npm command.
func parseCommand(command string) ([]string, map[string]string, error) {
	w, err := words(command)
	if err != nil {
		return nil, nil, err
	}
	if len(w) == 0 {
		return nil, nil, fmt.Errorf("an empty command")
	}
	if w[0].text != "npm" {
		return nil, nil, fmt.Errorf("toa-push cannot run %s", w[0].text)
	}
	if len(w) < 2 {
		return nil, nil, fmt.Errorf("npm without a command")
	}
	switch w[1].text {
	case "i", "install", "add", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal", "isntall":
		return parseInstall(w[2:])
	case "config", "c":
		if len(w) < 3 || w[2].text != "set" {
			return nil, nil, fmt.Errorf("of npm config, toa-push runs only `npm config set`")
		}
		cfg, err := parseSet(w[3:])
		return nil, cfg, err
	case "set":
		cfg, err := parseSet(w[2:])
		return nil, cfg, err
	}
	return nil, nil, fmt.Errorf("toa-push cannot run npm %s", w[1].text)
}

// parseInstall reads the arguments of a global install.
func parseInstall(args []word) ([]string, map[string]string, error) {
	var pkgs []string
	config := map[string]string{}
	global := false
	for i := 0; i < len(args); i++ {
		a := args[i].text
		if !strings.HasPrefix(a, "-") {
			if args[i].variable {
				return nil, nil, fmt.Errorf("the package %s names a variable, which toa-push does not expand: write the package", a)
			}
			pkgs = append(pkgs, a)
			continue
		}
		switch a {
		case "-g", "--global", "--location=global":
			global = true
		case "--omit=dev", "--production", "--only=prod", "--only=production", "--no-audit", "--no-fund",
			"--audit=false", "--fund=false", "-q", "--quiet", "-s", "--silent", "--no-save", "--unsafe-perm",
			"--unsafe-perm=true", "--no-update-notifier", "--no-progress", "--progress=false":
			// what a global install does anyway, or says nothing of what it installs
		case "--omit":
			if i+1 < len(args) && args[i+1].text == "dev" {
				i++
				continue
			}
			return nil, nil, fmt.Errorf("toa-push omits only dev dependencies")
		case "--legacy-peer-deps", "--legacy-peer-deps=true":
			config["legacy-peer-deps"] = "true"
		default:
			if v, ok := strings.CutPrefix(a, "--registry="); ok {
				config["registry"] = v
				continue
			}
			if a == "--registry" && i+1 < len(args) {
				i++
				config["registry"] = args[i].text
				continue
			}
			return nil, nil, fmt.Errorf("toa-push does not know what the option %s would do to a global install", a)
		}
	}
	if !global {
		return nil, nil, fmt.Errorf("an install that is not global (-g) has nowhere to go: a component's dependencies come from its package.json")
	}
	if len(pkgs) == 0 {
		return nil, nil, fmt.Errorf("a global install of no package")
	}
	return pkgs, config, nil
}

// parseSet reads the arguments of `npm config set`: key value, or key=value pairs.
func parseSet(args []word) (map[string]string, error) {
	config := map[string]string{}
	var rest []word
	for _, a := range args {
		switch a.text {
		case "-g", "--global", "--location=global", "--location=user", "--location=project":
			continue // every setting configures the installs of this build alike
		}
		if strings.HasPrefix(a.text, "-") {
			return nil, fmt.Errorf("toa-push does not know the option %s of npm config set", a.text)
		}
		rest = append(rest, a)
	}
	value := func(w word) string {
		if !w.variable {
			return w.text
		}
		return variableRef.ReplaceAllStringFunc(w.text, func(ref string) string {
			m := variableRef.FindStringSubmatch(ref)
			return "${" + m[1] + m[2] + "}"
		})
	}
	for i := 0; i < len(rest); i++ {
		k, v, ok := strings.Cut(rest[i].text, "=")
		switch {
		case ok && k != "":
			config[k] = value(word{v, rest[i].variable})
		case !ok && i+1 < len(rest):
			config[k] = value(rest[i+1])
			i++
		default:
			return nil, fmt.Errorf("npm config set needs a key and a value")
		}
	}
	if len(config) == 0 {
		return nil, fmt.Errorf("npm config set needs a key and a value")
	}
	return config, nil
}

// pinned matches a package at an exact version: name@1.2.3, @scope/name@1.2.3-rc.1.
var pinned = regexp.MustCompile(`^(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*@\d+\.\d+\.\d+(-[\w.-]+)?(\+[\w.-]+)?$`)

// Global is the layer of the global installs of build.run lines (see ParseRun): npm installs
// their packages for the platform into a staging /usr/local (npm install -g --prefix), with the
// platform flags and the configuration of the lines' `npm config set`, WithNpmConfig, the
// context's .npmrc and the runner's; the layer holds usr/local/lib/node_modules/<package> and
// the usr/local/bin links npm makes. Native code and scripts are treated as in Dependencies.
// Lines with no global install give no layer: nil, nil. A line Global cannot run is the
// *fault.Input of ParseRun.
//
// The layer is cached, as the dependencies are, only when every package is pinned to an exact
// version (name@1.2.3); otherwise npm runs each time, and a warning says the layer is not
// reproducible.
func Global(ctx context.Context, lines []string, p Platform, opts ...Option) (v1.Layer, error) {
	pkgs, config, err := ParseRun(strings.Join(lines, "\n"))
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, nil
	}
	o, err := newOptions(append(opts, WithNpmConfig(config)))
	if err != nil {
		return nil, err
	}
	in, err := o.newInstall(ctx, p)
	if err != nil {
		return nil, err
	}
	o.checkArguments()
	var npmrc strings.Builder
	npmrc.WriteString(readOptional(userConfig()))
	npmrc.WriteString("\n")
	npmrc.WriteString(npmrcOf(o.npmConfig))
	if o.contextRoot != "" {
		data, err := fsys.ReadFile(filepath.Join(o.contextRoot, ".npmrc"), fsys.MaxPackageSize)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		npmrc.Write(data)
		npmrc.WriteString("\n")
	}

	key := newKey("global")
	cacheable := true
	for _, pkg := range pkgs {
		key.field("package", pkg)
		cacheable = cacheable && pinned.MatchString(pkg)
	}
	if !cacheable {
		o.warn(fmt.Sprintf("npm i -g %s: a package without an exact version (name@1.2.3) installs whatever is latest, so the image is not reproducible",
			strings.Join(pkgs, " ")))
	}
	prefixIn := func(staging string) string { return filepath.Join(staging, "usr", "local") }
	return o.run(ctx, in, job{
		kind:      "global",
		what:      strings.Join(pkgs, " "),
		key:       key,
		npmrc:     npmrc.String(),
		cacheable: cacheable,
		stage: func(staging string) (string, []string, error) {
			prefix := prefixIn(staging)
			if err := os.MkdirAll(prefix, 0o755); err != nil {
				return "", nil, err
			}
			userconfig := filepath.Join(staging, "npmrc")
			if err := os.WriteFile(userconfig, []byte(npmrc.String()), 0o600); err != nil {
				return "", nil, err
			}
			args := []string{"install", "--global", "--prefix=" + prefix, "--userconfig=" + userconfig}
			if g := globalConfig(in.runner); g != "" {
				args = append(args, "--globalconfig="+g)
			}
			if cacheable {
				args = append(args, "--prefer-offline") // exact versions: what the cache holds is what would be fetched
			}
			return staging, append(args, pkgs...), nil
		},
		modules: func(staging string) string { return filepath.Join(prefixIn(staging), "lib", "node_modules") },
		// the scripts npm skipped run in the base with each package at its place in the image,
		// /usr/local/lib/node_modules/<package>: the base's own packages there (its npm) stay
		installDir: func(staging string) string { return filepath.Join(prefixIn(staging), "lib") },
		target:     "/usr/local/lib",
		installBinds: func(staging string) []sandbox.Bind {
			return globalBinds(filepath.Join(prefixIn(staging), "lib", "node_modules"))
		},
		native:   func(natives []nativePackage) error { return nativeError("", "registry.build.run", in, natives) },
		scripted: true, // no lockfile says otherwise
		fill: func(staging string, w *tarWriter) error {
			prefix := prefixIn(staging)
			if bin := filepath.Join(prefix, "bin"); fileExists(bin) {
				if err := w.tree(bin, "usr/local/bin", treeOptions{skip: installedExcluded}); err != nil {
					return err
				}
			}
			return w.tree(filepath.Join(prefix, "lib", "node_modules"), "usr/local/lib/node_modules", treeOptions{skip: installedExcluded})
		},
	})
}

// globalBinds bind each package of a global install's node_modules folder at its place in the
// base's /usr/local/lib/node_modules.
func globalBinds(modules string) []sandbox.Bind {
	var binds []sandbox.Bind
	entries, _ := os.ReadDir(modules)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		names := []string{name}
		if strings.HasPrefix(name, "@") {
			names = nil
			scoped, _ := os.ReadDir(filepath.Join(modules, name))
			for _, s := range scoped {
				names = append(names, name+"/"+s.Name())
			}
		}
		for _, n := range names {
			binds = append(binds, sandbox.Bind{Source: filepath.Join(modules, n), Target: "/usr/local/lib/node_modules/" + n})
		}
	}
	return binds
}
