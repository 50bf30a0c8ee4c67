package layer

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestSteps(t *testing.T) {
	for _, c := range []struct {
		name  string
		lines []string
		want  []Step
	}{
		{"none", []string{"", "# a comment"}, nil},
		{"shell lines are one step", []string{"echo a", "echo b"}, []Step{{Shell: []string{"echo a", "echo b"}, Config: map[string]string{}}}},
		{"a global install between two shell lines", []string{"echo a", "npm i -g semver@7.6.3", "test -e /usr/local/lib/node_modules/semver"},
			[]Step{{Shell: []string{"echo a"}, Config: map[string]string{}}, {Global: []string{"npm i -g semver@7.6.3"}, Config: map[string]string{}},
				{Shell: []string{"test -e /usr/local/lib/node_modules/semver"}, Config: map[string]string{}}}},
		{"configuration reaches the steps after it", []string{"npm i -g a@1.0.0", "npm config set registry http://r/", "npm i -g b@1.0.0", "echo c"},
			[]Step{{Global: []string{"npm i -g a@1.0.0", "npm i -g b@1.0.0"}, Config: map[string]string{"registry": "http://r/"}},
				{Shell: []string{"echo c"}, Config: map[string]string{"registry": "http://r/"}}}},
		{"a global install after a line that configures npm runs in the base", []string{"echo registry=http://r/ > /root/.npmrc", "npm i -g a@1.0.0"},
			[]Step{{Shell: []string{"echo registry=http://r/ > /root/.npmrc", "npm i -g a@1.0.0"}, Config: map[string]string{}, InBase: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Steps(c.lines); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Steps(%q) =\n%+v\nwant\n%+v", c.lines, got, c.want)
			}
		})
	}
}

// The build's environment is the documented list: nothing of toa-push's or the runner's
// credentials, the arguments with their values, npm's registry and plain configuration keys.
func TestBuildEnv(t *testing.T) {
	t.Setenv("TOA_SIGN_KEY", "secret")
	t.Setenv("COSIGN_PASSWORD", "secret")
	t.Setenv("NPM_TOKEN", "secret")
	t.Setenv("npm_config__auth", "secret")
	t.Setenv("TOA_TEST_ARGUMENT", "from-the-runner")
	t.Setenv("HTTPS_PROXY", "http://proxy:3128")
	o := &options{registry: "http://npm.example/", arguments: []string{"TOA_TEST_ARGUMENT", "UNSET_ARGUMENT"}}
	cfg := &v1.ConfigFile{Config: v1.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin", "NODE_VERSION=18.20.4", "HOME=/home/node"}}}
	env := o.buildEnv(cfg, t.TempDir(), map[string]string{"legacy-peer-deps": "true", "//npm.example/:_authToken": "${NPM_TOKEN}", "fetch-retries": "${TOA_TEST_ARGUMENT}"})
	want := []string{"HOME=/root", "PATH=/usr/local/bin:/usr/bin", "NODE_VERSION=18.20.4", "NODE_ENV=production", "npm_config_cache=/tmp/.toa-npm-cache",
		"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false", "npm_config_registry=http://npm.example/",
		"npm_config_fetch_retries=from-the-runner", "npm_config_legacy_peer_deps=true", "TOA_TEST_ARGUMENT=from-the-runner", "HTTPS_PROXY=http://proxy:3128"}
	if !slices.Equal(env, want) {
		t.Errorf("buildEnv =\n%s\nwant\n%s", strings.Join(env, "\n"), strings.Join(want, "\n"))
	}
}
