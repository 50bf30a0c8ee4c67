package layer

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// buildEnv is the whole environment of a build.run line and of an install script inside the
// base, as Toa 289's dependencies.Dockerfile gave its RUNs (README, "What a dependency's script
// can see"), and nothing else of the runner's:
//
//   - the base image's own ENV (PATH, NODE_VERSION, ...), and HOME=/root where it sets none;
//   - NODE_ENV=production (289's ENV);
//   - each registry.build.arguments variable with its value on the runner (289's ARG + ENV;
//     the image's config never holds them);
//   - npm_config_registry and npm_config_proxy of runtime.registry and runtime.proxy (289's
//     `npm set registry|proxy`), and each `npm config set` of build.run whose key is a plain
//     name, credentials left out;
//   - npm_config_cache in the run's own /tmp, so that the runner's npm cache is not there;
//   - npm_config_nodedir where the base holds its node's headers, so that node-gyp builds
//     without a download;
//   - the runner's HTTP_PROXY, HTTPS_PROXY, NO_PROXY (and their lower-case spellings), which
//     BuildKit also hands every RUN.
//
// No variable of toa-push's (TOA_*, SOURCE_DATE_EPOCH), no npm_config_* of the runner's, no
// credential of the registries, the cluster or the signing key.
func (o *options) buildEnv(cfg *v1.ConfigFile, root string, config map[string]string) []string {
	env := baseEnv(cfg, root)
	env = append(env, "NODE_ENV=production", "npm_config_cache=/tmp/.toa-npm-cache",
		"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	if o.registry != "" {
		env = append(env, "npm_config_registry="+o.registry)
	}
	if o.proxy != "" {
		env = append(env, "npm_config_proxy="+o.proxy)
	}
	for _, k := range sortedConfigKeys(config) {
		if plainConfigKey.MatchString(k) && !isAuthKey(k) {
			env = append(env, "npm_config_"+strings.ReplaceAll(k, "-", "_")+"="+expandConfig(config[k], o.arguments))
		}
	}
	for _, name := range o.arguments {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for _, name := range proxyVariables {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return dedupeEnv(env)
}

// proxyVariables are the runner's proxy settings a script downloading a prebuilt binary needs.
var proxyVariables = []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"}

// plainConfigKey is an npm configuration key an environment variable can carry.
var plainConfigKey = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// expandConfig replaces the ${NAME} of a configuration value with the value of NAME when NAME is
// one of the build's arguments, as npm replaces them from its environment.
func expandConfig(value string, arguments []string) string {
	return variableRef.ReplaceAllStringFunc(value, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2]
		for _, a := range arguments {
			if a == name {
				return os.Getenv(name)
			}
		}
		return ""
	})
}

func sortedConfigKeys(config map[string]string) []string {
	keys := make([]string, 0, len(config))
	for k := range config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// dedupeEnv keeps the last value of each variable, in the order of their first place.
func dedupeEnv(env []string) []string {
	last := map[string]string{}
	var order []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, seen := last[k]; !seen {
			order = append(order, k)
		}
		last[k] = v
	}
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = k + "=" + last[k]
	}
	return out
}

// envKey writes what buildEnv takes from the runner into a cache key: the names and hashed
// values of the arguments and proxy variables, npm's registry, proxy and configuration.
func (o *options) envKey(k *keyHash, config map[string]string) {
	k.field("registry", o.registry)
	k.field("proxy", o.proxy)
	for _, key := range sortedConfigKeys(config) {
		if !isAuthKey(key) {
			k.field("npm config "+key, config[key])
		}
	}
	for _, name := range append(append([]string(nil), o.arguments...), proxyVariables...) {
		if v, ok := os.LookupEnv(name); ok {
			sum := sha256.Sum256([]byte(v))
			k.field("variable "+name, hex.EncodeToString(sum[:]))
		}
	}
}

// baseEnv is the base's own environment (PATH, NODE_VERSION...), HOME, and where node-gyp finds
// the headers of the base's node without a download.
func baseEnv(cfg *v1.ConfigFile, root string) []string {
	env := []string{"HOME=/root"}
	hasPath := false
	for _, kv := range cfg.Config.Env {
		if strings.HasPrefix(kv, "PATH=") {
			hasPath = true
		}
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	if !hasPath {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	for _, prefix := range []string{"/usr/local", "/usr"} {
		if fileExists(filepath.Join(root, prefix, "include", "node", "node.h")) {
			env = append(env, "npm_config_nodedir="+prefix)
			break
		}
	}
	return env
}
