package layer

import (
	"archive/tar"
	"context"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

func TestParseRun(t *testing.T) {
	for _, c := range []struct {
		run    string
		global []string
		config map[string]string
		refuse string // what the error says, or "" when the lines are read
	}{
		{run: "", config: map[string]string{}},
		{run: "npm i -g @toa.io/runtime --omit=dev", global: []string{"@toa.io/runtime"}, config: map[string]string{}},
		{run: "npm install --global a@1.0.0 b", global: []string{"a@1.0.0", "b"}, config: map[string]string{}},
		{run: "npm install -g --legacy-peer-deps x\n\n# a comment\nnpm add --location=global y",
			global: []string{"x", "y"}, config: map[string]string{"legacy-peer-deps": "true"}},
		{run: "npm config set @acme:registry https://npm.acme.example/\nnpm set fetch-retries=5 fetch-timeout=1000",
			config: map[string]string{"@acme:registry": "https://npm.acme.example/", "fetch-retries": "5", "fetch-timeout": "1000"}},
		{run: `npm config set //npm.acme.example/:_authToken $NPM_TOKEN && npm i -g "@acme/cli@2.0.0"`,
			global: []string{"@acme/cli@2.0.0"}, config: map[string]string{"//npm.acme.example/:_authToken": "${NPM_TOKEN}"}},
		{run: `npm config set key "${A}-$B"`, config: map[string]string{"key": "${A}-${B}"}},
		{run: "apt-get install curl", refuse: "`apt-get install curl`: toa-push cannot run apt-get"},
		{run: "npm i -g x\napk add --no-cache git", refuse: "`apk add --no-cache git`"},
		{run: "npm i lodash", refuse: "not global"},
		{run: "npm ci", refuse: "cannot run npm ci"},
		{run: "npm i -g $PKG", refuse: "variable"},
		{run: "npm i -g --force x", refuse: "--force"},
		{run: "npm config get registry", refuse: "only `npm config set`"},
		{run: "curl https://example.com/install.sh | sh", refuse: "needs a shell"},
		{run: "npm i -g x; rm -rf /", refuse: "needs a shell"},
		{run: "npm i -g 'x", refuse: "quote"},
	} {
		global, config, err := ParseRun(c.run)
		if c.refuse != "" {
			if !fault.IsInput(err) || !strings.Contains(err.Error(), c.refuse) || !strings.Contains(err.Error(), "base image") {
				t.Errorf("%q: %v", c.run, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.run, err)
			continue
		}
		if !reflect.DeepEqual(global, c.global) || !reflect.DeepEqual(config, c.config) {
			t.Errorf("%q: %q %q", c.run, global, config)
		}
	}
}

// TestGlobal is not parallel, so that the count of npm's runs is its own.
func TestGlobal(t *testing.T) {
	npmTest(t)
	cache := WithCacheDir(t.TempDir())
	lines := []string{"npm config set fetch-retries 3", "npm i -g semver@7.6.3 --omit=dev"}
	for _, p := range []Platform{amd64, arm64} {
		l, err := Global(context.Background(), lines, p, cache, npmCache)
		if err != nil {
			t.Fatal(err)
		}
		list := entries(t, l)
		if e := find(list, "usr/local/bin/semver"); e == nil || e.Typeflag != tar.TypeSymlink || e.Linkname != "../lib/node_modules/semver/bin/semver.js" {
			t.Errorf("%s: usr/local/bin/semver: %+v", p, e)
		}
		if e := find(list, "usr/local/lib/node_modules/semver/bin/semver.js"); e == nil || e.Mode != 0o755 {
			t.Errorf("%s: semver.js: %+v", p, e)
		}
		if names(list)[0] != "usr/" {
			t.Errorf("%s: the layer begins with %s", p, names(list)[0])
		}
		var again v1.Layer
		withoutNpm(t, func(runner Option) {
			again, err = Global(context.Background(), lines, p, cache, npmCache, runner)
		})
		if err != nil {
			t.Fatalf("%s: not cached: %v", p, err)
		}
		if digest(t, again) != digest(t, l) {
			t.Errorf("%s: the cached layer is another blob", p)
		}
	}

	// an unpinned package is installed each time, with a warning
	warnings := &collect{}
	if _, err := Global(context.Background(), []string{"npm i -g is-number"}, amd64, cache, npmCache, WithWarnings(warnings.warn)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warnings.String(), "not reproducible") {
		t.Errorf("no warning for an unpinned package: %s", warnings)
	}

	l, err := Global(context.Background(), []string{"npm config set fetch-retries 3"}, amd64, cache)
	if l != nil || err != nil {
		t.Errorf("no global install: %v, %v", l, err)
	}
	if _, err := Global(context.Background(), []string{"apt-get install curl"}, amd64, cache); !fault.IsInput(err) {
		t.Errorf("apt-get: %v", err)
	}
}
