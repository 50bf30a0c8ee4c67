package layer

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// ErrGitPrepare is what the *fault.Input of a git dependency whose prepare script must run wraps.
var ErrGitPrepare = errors.New("a git dependency needs its prepare script")

// refuseGitPrepare refuses the packages npm installed from a git repository that have a prepare
// script. npm builds such a package by running `npm install` and its prepare script in the
// clone, on the runner, before it packs it (pacote's git fetcher); toa-push's npm runs with
// npm_config_ignore_scripts, which that inner install inherits, so the prepare script did not run
// and what it builds (a dist folder, compiled code) is missing. Never skipped silently: each is
// named, with what to do.
func refuseGitPrepare(modules, what string) error {
	packages, err := lockfile.Read(lockfile.HiddenIn(modules))
	if err != nil {
		return nil // no tree, or none npm described: no git dependency to look at
	}
	var refused []string
	for location, e := range packages {
		if !e.FromGit() {
			continue
		}
		var pkg struct {
			Name    string            `json:"name"`
			Version string            `json:"version"`
			Scripts map[string]string `json:"scripts"`
		}
		rel := strings.TrimPrefix(location, "node_modules/")
		if _, err := fsys.ReadJSON(filepath.Join(modules, filepath.FromSlash(rel), "package.json"), fsys.MaxPackageSize, &pkg); err != nil {
			continue
		}
		if pkg.Scripts["prepare"] != "" {
			refused = append(refused, fmt.Sprintf("%s@%s (%s, from %s): prepare: %s", pkg.Name, pkg.Version, location, e.Resolved, pkg.Scripts["prepare"]))
		}
	}
	if len(refused) == 0 {
		return nil
	}
	sort.Strings(refused)
	return &fault.Input{Err: ErrGitPrepare,
		Message: fmt.Sprintf("%s: %d git dependencies need their prepare script, which npm would run on the runner while it packs them, where toa-push runs no dependency's script:\n    %s",
			what, len(refused), strings.Join(refused, "\n    ")),
		Hint: "depend on a published version of the package, or on a tarball built with its prepare script (npm pack in its repository)"}
}
