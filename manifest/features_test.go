package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Toa's deployment features (toa-io/toa features/deployment/*.feature and templates/*.feature,
// of 1.0.0-alpha.110), replayed as Toa 289 renders them: each scenario takes components of the
// features' workspace and sets keys of its context over the workspace's (Object.assign, as the
// features' steps do), and what the feature asserts of the values or of `helm template` is
// asserted of the objects. Where 289 writes differently from 110, the 289 value is asserted and
// the difference said: values are JSON, not base64; the gateway's readiness probe is on 8004 and
// its startup probe waits 3 seconds. Two scenarios the issue asks for are added: a component with
// `storages: tmp`, and one with neither operations nor events.
//
// The components are testdata/apps/collection's, shaped as the workspace's; where Toa's own
// examples are beside the checkout (../shared/toa-examples, or $TOA_EXAMPLES), the scenarios run
// against the workspace's real manifests too.
func TestToaFeatures(t *testing.T) {
	sources := map[string]func(t *testing.T) string{
		"testdata": func(*testing.T) string { return filepath.Join("..", "testdata", "apps", "collection", "components") },
		"toa-examples": func(t *testing.T) string {
			return filepath.Join(toaExamples(t), "features", "steps", ".workspace", "components", "collection")
		},
	}
	for name, source := range sources {
		t.Run(name, func(t *testing.T) {
			components := source(t)
			for _, sc := range toaFeatures {
				t.Run(sc.name, func(t *testing.T) {
					objects := renderFeature(t, components, sc)
					sc.then(t, objects)
				})
			}
		})
	}
}

type featureScenario struct {
	name       string
	components []string
	context    string // top-level keys set over the workspace's context
	env        string
	then       func(t *testing.T, objects map[string]Object)
}

var toaFeatures = []featureScenario{
	// amqp.feature
	{"amqp: deploy a context", []string{"external.consumer"},
		"amqp:\n  context: amqp://localhost\n  sources:\n    external: amqp://external.example.com\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-external-consumer",
				// 110: eyIuIjpbImFtcXA6Ly9sb2NhbGhvc3QiXX0= (the same, in base64)
				value("TOA_AMQP_CONTEXT", `{".":["amqp://localhost"]}`),
				secret("TOA_AMQP_CONTEXT__USERNAME", "toa-amqp-context.default", "username"),
				secret("TOA_AMQP_CONTEXT__PASSWORD", "toa-amqp-context.default", "password"))
		}},
	{"amqp: a namespace's cluster", []string{"external.consumer"},
		"amqp:\n  context:\n    external: amqp://localhost\n  sources:\n    external: amqp://localhost\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-external-consumer",
				secret("TOA_AMQP_CONTEXT_EXTERNAL_USERNAME", "toa-amqp-context-external", "username"),
				secret("TOA_AMQP_CONTEXT_EXTERNAL_PASSWORD", "toa-amqp-context-external", "password"))
		}},
	{"amqp: a component's cluster", []string{"external.consumer"},
		"amqp:\n  context:\n    external.consumer: amqp://localhost\n  sources:\n    external: amqp://localhost\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-external-consumer",
				secret("TOA_AMQP_CONTEXT_EXTERNAL_CONSUMER_USERNAME", "toa-amqp-context-external-consumer", "username"),
				secret("TOA_AMQP_CONTEXT_EXTERNAL_CONSUMER_PASSWORD", "toa-amqp-context-external-consumer", "password"))
		}},
	{"amqp: sources pointer", []string{"external.consumer"},
		"amqp:\n  context: amqp://localhost\n  sources:\n    external: amqp://external.example.com\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-external-consumer",
				value("TOA_AMQP_SOURCES_EXTERNAL", "amqp://external.example.com"),
				secret("TOA_AMQP_SOURCES_EXTERNAL_USERNAME", "toa-amqp-sources-external", "username"),
				secret("TOA_AMQP_SOURCES_EXTERNAL_PASSWORD", "toa-amqp-sources-external", "password"))
		}},
	// pointer.feature
	{"pointer: a default URL", []string{"stash"}, "stash: redis://redis.example.com\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-default-stash", value("TOA_STASH_DEFAULT_STASH", "redis://redis.example.com"))
			noEnv(t, o, "composition-default-stash", "TOA_STASH_DEFAULT_STASH_USERNAME")
		}},
	{"pointer: a default URL set", []string{"stash"}, "stash:\n  - redis://redis0.example.com\n  - redis://redis1.example.com\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-default-stash", value("TOA_STASH_DEFAULT_STASH", "redis://redis0.example.com redis://redis1.example.com"))
		}},
	{"pointer: a URL for a component", []string{"stash"}, "stash:\n  default.stash: redis://redis.example.com\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-default-stash", value("TOA_STASH_DEFAULT_STASH", "redis://redis.example.com"))
		}},
	{"pointer: a URL for a namespace", []string{"stash"}, "stash:\n  default: redis://redis.example.com\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-default-stash", value("TOA_STASH_DEFAULT_STASH", "redis://redis.example.com"))
		}},
	{"pointer: credentials", []string{"mongo.one"}, "mongodb: mongodb://mongo.exmaple.com\n", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-mongo-one",
				value("TOA_MONGODB_MONGO_ONE", "mongodb://mongo.exmaple.com"),
				secret("TOA_MONGODB_MONGO_ONE_USERNAME", "toa-mongodb.default", "username"),
				secret("TOA_MONGODB_MONGO_ONE_PASSWORD", "toa-mongodb.default", "password"))
		}},
	// components.feature and composition.feature
	{"two components without explicit compositions", []string{"dummies.one", "dummies.two"}, "", "",
		func(t *testing.T, o map[string]Object) {
			for _, name := range []string{"dummies-one", "dummies-two"} {
				if _, ok := o["Service/"+name].(*corev1.Service); !ok {
					t.Errorf("no Service %s", name)
				}
				d, ok := o["Deployment/composition-"+name].(*appsv1.Deployment)
				if !ok || d.Spec.Template.Labels["toa/component-"+name] != "1" {
					t.Errorf("the composition %s of %s: %v", name, name, d)
				}
			}
		}},
	// credentials.feature
	{"image pull secret", []string{"dummies.one"}, "registry:\n  base: localhost:5000\n  credentials: docker-credentials-secret-name\n", "",
		func(t *testing.T, o map[string]Object) {
			d := deploymentNamed(t, o, "composition-dummies-one")
			if want := []corev1.LocalObjectReference{{Name: "docker-credentials-secret-name"}}; !reflect.DeepEqual(d.Spec.Template.Spec.ImagePullSecrets, want) {
				t.Errorf("imagePullSecrets %v", d.Spec.Template.Spec.ImagePullSecrets)
			}
		}},
	// templates/env.feature
	{"TOA_ENV for compositions", []string{"dummies.one"}, "", "production",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-dummies-one", value("TOA_ENV", "production"))
		}},
	{"TOA_ENV for services", []string{"exposed.one"}, "configuration:\n  identity.tokens:\n    key0: secret.key\n", "production",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "extension-exposition-gateway", value("TOA_ENV", "production"))
		}},
	{"a common variable", []string{"external.consumer", "external.consumer2"},
		"compositions:\n  - name: external\n    components:\n      - external.consumer\n      - external.consumer2\n" +
			"amqp:\n  context: amqp://localhost\n  sources:\n    external: amqp://rmq.example.com\n", "production",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-external", value("TOA_AMQP_SOURCES_EXTERNAL", "amqp://rmq.example.com"))
		}},
	// templates/secrets.feature
	{"secrets of the system binding", []string{"dummies.one"}, "", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-dummies-one",
				secret("TOA_AMQP_CONTEXT__USERNAME", "toa-amqp-context.default", "username"),
				secret("TOA_AMQP_CONTEXT__PASSWORD", "toa-amqp-context.default", "password"))
		}},
	// templates/services.feature: the feature's `exposition` replaces the workspace's without its
	// authorities, which the exposition's annotation schema requires (`authorities*`); they are
	// kept here
	{"a service with global variables", []string{"exposed.one"},
		"exposition:\n  authorities:\n    local: localhost\n  /:\n    GET:\n      dev:stub: ok!\nconfiguration:\n  identity.tokens:\n    key0: secret.key\n", "dev",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "extension-exposition-gateway",
				secret("TOA_AMQP_CONTEXT__USERNAME", "toa-amqp-context.default", "username"),
				secret("TOA_AMQP_CONTEXT__PASSWORD", "toa-amqp-context.default", "password"))
		}},
	{"a service with an ingress", []string{"exposed.one"},
		"exposition:\n  authorities:\n    foo: api.foo.dev\n    bar: api.bar.dev\n  /:\n    GET:\n      dev:stub: ok!\nconfiguration:\n  identity.tokens:\n    key0: secret.key\n", "dev",
		func(t *testing.T, o map[string]Object) {
			in, ok := o["Ingress/extension-exposition-gateway"].(*networkingv1.Ingress)
			if !ok {
				t.Fatal("no Ingress of the gateway")
			}
			var hosts []string
			for _, r := range in.Spec.Rules {
				hosts = append(hosts, r.Host)
			}
			if want := []string{"api.foo.dev", "api.bar.dev"}; !reflect.DeepEqual(hosts, want) {
				t.Errorf("rules' hosts %v, want %v", hosts, want)
			}
		}},
	{"a service with a probe", []string{"exposed.one"},
		"exposition:\n  authorities:\n    local: localhost\n  /:\n    GET:\n      dev:stub: ok!\nconfiguration:\n  identity.tokens:\n    key0: secret.key\n", "dev",
		func(t *testing.T, o map[string]Object) {
			// 110: readinessProbe on 8000 with initialDelaySeconds 1; 289: the gateway answers on
			// 8004, and the delay is the startup probe's
			c := containerOf(t, o, "extension-exposition-gateway")
			if p := c.ReadinessProbe; p == nil || p.HTTPGet.Path != "/.ready" || p.HTTPGet.Port.IntValue() != 8004 {
				t.Errorf("readinessProbe %+v", p)
			}
			if p := c.StartupProbe; p == nil || p.HTTPGet.Port.IntValue() != 8004 || p.InitialDelaySeconds != 3 {
				t.Errorf("startupProbe %+v", p)
			}
		}},
	// the issue's: `storages: tmp`, and a component with neither operations nor events
	{"a component with storages: tmp", []string{"storage"}, "", "",
		func(t *testing.T, o map[string]Object) {
			wantEnv(t, o, "composition-default-storage", value("TOA_STORAGES", `{"tmp":{"provider":"tmp","directory":"test"}}`))
			if m := containerOf(t, o, "composition-default-storage").VolumeMounts; len(m) != 0 {
				t.Errorf("a tmp storage mounts nothing: %v", m)
			}
		}},
	{"a component with no operations", []string{"dummies.quiet"}, "amqp: ~\n", "",
		func(t *testing.T, o map[string]Object) {
			for _, e := range containerOf(t, o, "composition-dummies-quiet").Env {
				if strings.HasPrefix(e.Name, "TOA_AMQP") {
					t.Errorf("%s in a component that binds nothing", e.Name)
				}
			}
		}},
}

// workspace is the context of Toa's feature workspace (features/steps/.workspace), as the
// scenarios start from it, in keys that a scenario's keys replace. It declares resources, which
// Toa 289 asks of every composition and the workspace, of 110, did not.
var workspace = []struct{ key, yaml string }{
	{"name", "name: collection\n"},
	{"version", "version: 0.0.0\n"},
	{"runtime", "runtime:\n  registry: http://host.docker.internal:4873\n  proxy: http://host.docker.internal:4873\n"},
	{"registry", "registry:\n  base: localhost:5000\n  platforms: ~\n"},
	{"resources", "resources:\n  cpu: [100m, 1]\n  memory: [128Mi, 1Gi]\n"},
	{"amqp", "amqp: amqp://localhost\namqp@docker: amqp://host.docker.internal\n"},
	{"mongodb", "mongodb: mongodb://localhost\nmongodb@docker: mongodb://host.docker.internal\n"},
	{"sql", "sql: pg://localhost/developer\nsql@docker: pg://host.docker.internal/developer\n"},
	{"stash", "stash@docker: redis://host.docker.internal\n"},
	{"storages", "storages:\n  tmp:\n    provider: tmp\n    directory: test\n"},
	{"exposition", "exposition:\n  authorities:\n    local: localhost\n"},
}

// renderFeature writes the scenario's context and components, with the stand-ins installed, and
// renders it.
func renderFeature(t *testing.T, components string, sc featureScenario) map[string]Object {
	t.Helper()
	harness.Program(t, "node", nodeInstall)
	dir := t.TempDir()
	set := map[string]string{}
	var order []string
	for _, line := range strings.SplitAfter(sc.context, "\n") {
		if line == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '-' {
			key := strings.SplitN(line, ":", 2)[0]
			order = append(order, key)
		}
		set[order[len(order)-1]] += line
	}
	var ctx strings.Builder
	for _, w := range workspace {
		if v, ok := set[w.key]; ok {
			ctx.WriteString(v)
			delete(set, w.key)
			continue
		}
		ctx.WriteString(w.yaml)
	}
	for _, k := range order {
		ctx.WriteString(set[k])
	}
	writeText(t, filepath.Join(dir, "context.toa.yaml"), ctx.String())
	for _, id := range sc.components {
		src := filepath.Join(components, id)
		if _, err := os.Stat(src); err != nil {
			t.Skipf("%s has no component %s", components, id)
		}
		copyTree(t, src, filepath.Join(dir, "components", id))
	}
	installStandins(t, dir)
	env := sc.env
	if env == "" {
		env = "default"
	}
	objects, err := renderContext(t, dir, env)
	if err != nil {
		t.Fatal(err)
	}
	return objects
}

// standinPackages are the stand-ins, by package name: what `npm install` of a context's
// package.json naming them all would put under its node_modules.
var standinPackages = map[string]string{
	"@toa.io/runtime":                  "runtime",
	"@toa.io/pointer":                  "extensions/pointer",
	"@toa.io/bindings.amqp":            "extensions/amqp",
	"@toa.io/storages.mongodb":         "extensions/mongodb",
	"@toa.io/storages.sql":             "extensions/sql",
	"@toa.io/storages.null":            "extensions/null",
	"@toa.io/extensions.configuration": "extensions/configuration",
	"@toa.io/extensions.exposition":    "extensions/exposition",
	"@toa.io/extensions.introspection": "extensions/introspection",
	"@toa.io/extensions.origins":       "extensions/origins",
	"@toa.io/extensions.realtime":      "extensions/realtime",
	"@toa.io/extensions.stash":         "extensions/stash",
	"@toa.io/extensions.state":         "extensions/state",
	"@toa.io/extensions.storages":      "extensions/storages",
	"@toa.io/extensions.telemetry":     "extensions/telemetry",
}

func installStandins(t *testing.T, dir string) {
	t.Helper()
	packages, err := filepath.Abs(filepath.Join("..", "testdata", "packages"))
	if err != nil {
		t.Fatal(err)
	}
	for name, folder := range standinPackages {
		link := filepath.Join(dir, "node_modules", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(packages, filepath.FromSlash(folder)), link); err != nil {
			t.Fatal(err)
		}
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeText(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// toaExamples is the folder of Toa's own examples (../shared/toa-examples, or $TOA_EXAMPLES). A
// clone alone has none: the test skips, saying so; its testdata twin covers the same ground.
func toaExamples(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TOA_EXAMPLES")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "toa-examples")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Skipf("Toa's examples are not beside the checkout (%s; set TOA_EXAMPLES): testdata/apps covers the same features", dir)
	}
	return dir
}

func deploymentNamed(t *testing.T, o map[string]Object, name string) *appsv1.Deployment {
	t.Helper()
	d, ok := o["Deployment/"+name].(*appsv1.Deployment)
	if !ok {
		var have []string
		for k := range o {
			have = append(have, k)
		}
		sort.Strings(have)
		t.Fatalf("no Deployment %s among %v", name, have)
	}
	return d
}

func containerOf(t *testing.T, o map[string]Object, name string) corev1.Container {
	t.Helper()
	return deploymentNamed(t, o, name).Spec.Template.Spec.Containers[0]
}

func value(name, v string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: v} }

func secret(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

// wantEnv asserts that the workload's container has each variable, as given.
func wantEnv(t *testing.T, o map[string]Object, workload string, want ...corev1.EnvVar) {
	t.Helper()
	env := containerOf(t, o, workload).Env
	for _, w := range want {
		i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == w.Name })
		if i < 0 {
			t.Errorf("%s has no %s; it has %v", workload, w.Name, envNames(env))
			continue
		}
		if !reflect.DeepEqual(env[i], w) {
			t.Errorf("%s: %+v, want %+v", workload, env[i], w)
		}
	}
}

func noEnv(t *testing.T, o map[string]Object, workload, name string) {
	t.Helper()
	for _, e := range containerOf(t, o, workload).Env {
		if e.Name == name {
			t.Errorf("%s has %s", workload, name)
		}
	}
}
