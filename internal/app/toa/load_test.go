package toa

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const apps = "../../../testdata/apps"

func load(t *testing.T, path, env string) *Application {
	t.Helper()
	app, err := Load(path, env)
	if err != nil {
		t.Fatalf("Load(%s, %q): %v", path, env, err)
	}
	return app
}

func compositionNames(app *Application) []string {
	var names []string
	for _, c := range app.Compositions {
		names = append(names, c.Name)
	}
	return names
}

func TestDerivedCompositions(t *testing.T) {
	app := load(t, filepath.Join(apps, "derived"), "default")
	if got, want := compositionNames(app), []string{"default-echo", "orders-orders", "orders-stats"}; !reflect.DeepEqual(got, want) {
		t.Errorf("compositions %v, want %v", got, want)
	}
	echo := app.Component("default.echo")
	if echo == nil || echo.Namespace != "default" || echo.Locator.Label != "default-echo" {
		t.Fatalf("echo without a namespace: %+v", echo)
	}
	orders := app.Component("orders.orders")
	if orders == nil || orders.Name != "orders" || orders.Namespace != "orders" || orders.VersionDeclared {
		t.Fatalf("name and namespace from the folder: %+v", orders)
	}
	if stats := app.Component("orders.stats"); stats.Version != "1.2.0" || !stats.VersionDeclared {
		t.Errorf("declared version: %+v", stats)
	}
	if !reflect.DeepEqual(app.Registry.Platforms, DefaultPlatforms()) || !app.Registry.PlatformsDefaulted {
		t.Errorf("default platforms: %+v", app.Registry)
	}
	if app.Registry.Base != "localhost:5000" {
		t.Errorf("registry as a string: %+v", app.Registry)
	}
	if v, ok := app.Annotation("@toa.io/bindings.amqp"); !ok || v != "amqp://rabbitmq" {
		t.Errorf("amqp shortcut: %v %v", v, ok)
	}
	if app.Resources == nil || app.Resources.CPU == nil || app.Resources.CPU.Limit != "500m" {
		t.Errorf("context resources: %+v", app.Resources)
	}
}

func TestDeclaredCompositionsPerEnvironment(t *testing.T) {
	dir := filepath.Join(apps, "declared")
	cases := []struct {
		env, base    string
		platforms    []string
		fromHost     bool
		memoryLimit  string
		monoReplicas int
		hosts        []string
		amqp         string
	}{
		{"", "localhost:5000/acme", []string{"linux/amd64", "linux/arm64"}, false, "500Mi", 3, []string{"shop.example.com"}, "amqp://rabbitmq"},
		{"dev", "localhost:5000/acme", []string{HostPlatform()}, true, "500Mi", 1, []string{"shop.example.com"}, "amqp://localhost"},
		{"staging", "registry.staging.internal/acme", []string{"linux/amd64", "linux/arm64"}, false, "500Mi", 3, []string{"shop.staging.example.com"}, "amqp://rabbitmq"},
		{"production", "registry.internal/acme", []string{"linux/amd64", "linux/arm64"}, false, "1Gi", 3, []string{"shop.example.com"}, "amqp://rabbitmq"},
		{"staging:production", "registry.staging.internal/acme", []string{"linux/amd64", "linux/arm64"}, false, "1Gi", 3, []string{"shop.staging.example.com"}, "amqp://rabbitmq"},
	}
	for _, c := range cases {
		t.Run("env="+c.env, func(t *testing.T) {
			app := load(t, dir, c.env)
			if want := strings.Split(c.env, ":")[0]; app.Environment != want {
				t.Errorf("environment %q, want %q", app.Environment, want)
			}
			if app.Registry.Base != c.base {
				t.Errorf("base %q, want %q", app.Registry.Base, c.base)
			}
			if !reflect.DeepEqual(app.Registry.Platforms, c.platforms) || app.Registry.PlatformsFromHost != c.fromHost {
				t.Errorf("platforms %v (host %v), want %v", app.Registry.Platforms, app.Registry.PlatformsFromHost, c.platforms)
			}
			if app.Resources.Memory.Limit != c.memoryLimit {
				t.Errorf("context memory limit %s, want %s", app.Resources.Memory.Limit, c.memoryLimit)
			}
			if app.Mono.Replicas != c.monoReplicas {
				t.Errorf("mono replicas %d, want %d", app.Mono.Replicas, c.monoReplicas)
			}
			if !reflect.DeepEqual(app.Ingress.Hosts, c.hosts) {
				t.Errorf("ingress hosts %v, want %v", app.Ingress.Hosts, c.hosts)
			}
			if v, _ := app.Annotation("@toa.io/bindings.amqp"); v != c.amqp {
				t.Errorf("amqp %v, want %v", v, c.amqp)
			}
		})
	}

	app := load(t, dir, "default")
	if got, want := compositionNames(app), []string{"front", "back", "audit-log"}; !reflect.DeepEqual(got, want) {
		t.Errorf("compositions %v, want %v (declared first, then derived)", got, want)
	}
	front := app.Composition("front")
	if !front.Declared || len(front.Components) != 2 || front.Components[0].Locator.ID != "shop.orders" {
		t.Errorf("front: %+v", front)
	}
	// the merge key takes cpu from the anchor and the composition's own memory
	if r := front.Resources; r.CPU.Request != "100m" || r.Memory.Limit != "1Gi" {
		t.Errorf("front resources: cpu %+v memory %+v", r.CPU, r.Memory)
	}
	back := app.Composition("back")
	if back.Image != "localhost:5000/bases/node:test" || back.Resources == nil || !back.Resources.None {
		t.Errorf("back: image %q resources %+v", back.Image, back.Resources)
	}
	if derived := app.Composition("audit-log"); derived.Declared || derived.Resources != nil {
		t.Errorf("derived composition: %+v", derived)
	}
	if app.Mono.Resources.Memory.Limit != "500Mi" {
		t.Errorf("mono resources through the alias: %+v", app.Mono.Resources)
	}
	if app.Registry.Credentials != "regcred" || !reflect.DeepEqual(app.Registry.Build.Arguments, []string{"NPM_TOKEN"}) {
		t.Errorf("registry: %+v", app.Registry)
	}
	if app.Runtime.Registry != "http://npm.internal:4873" {
		t.Errorf("runtime registry: %+v", app.Runtime)
	}
	if app.Atomicity == nil || app.Atomicity.Redis[0] != "redis://redis:6379" || *app.Outbox.Batch != 10 {
		t.Errorf("atomicity %+v outbox %+v", app.Atomicity, app.Outbox)
	}
	audit := app.Component("audit.log")
	if len(audit.Extensions) != 1 || audit.Extensions[0].Package != "@toa.io/extensions.exposition" {
		t.Errorf("extension keys of the manifest: %+v", audit.Extensions)
	}
}

func TestComponentWithoutPackageJSON(t *testing.T) {
	app := load(t, filepath.Join(apps, "nopackage"), "default")
	notes := app.Component("notes.notes")
	if notes.PackageJSON != "" || notes.ModuleType != "module" {
		t.Fatalf("notes: package.json %q, type %q", notes.PackageJSON, notes.ModuleType)
	}
	want := "{\n  \"name\": \"notes-notes\",\n  \"private\": true,\n  \"type\": \"module\"\n}\n"
	if got := string(notes.Declared()); got != want {
		t.Errorf("declared package.json %q, want %q", got, want)
	}
	if app.Resources == nil || !app.Resources.None {
		t.Errorf("resources: null is an answer: %+v", app.Resources)
	}
}

func TestRuntimeVersion(t *testing.T) {
	cases := []struct {
		runtime   string
		installed string
		want      string
	}{
		{"runtime: 1.0.0-alpha.289\n", "", "1.0.0-alpha.289"},
		{"runtime: {version: 2.0.0}\n", "9.9.9", "2.0.0"},
		{"runtime: .\n", "1.0.0-alpha.300", "1.0.0-alpha.300"},
		{"", "1.0.0-alpha.301", "1.0.0-alpha.301"},
		{"runtime: {registry: 'http://npm:4873'}\n", "1.0.0-alpha.302", "1.0.0-alpha.302"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		write(t, filepath.Join(dir, ContextFile), "name: x\nregistry: r\n"+c.runtime)
		if c.installed != "" {
			write(t, filepath.Join(dir, "node_modules/@toa.io/runtime/package.json"), `{"version":"`+c.installed+`"}`)
		}
		app := load(t, dir, "")
		if app.Runtime.Version != c.want {
			t.Errorf("%q with %q installed: %s, want %s", c.runtime, c.installed, app.Runtime.Version, c.want)
		}
	}
}

// toaExamples is the folder of Toa's own examples (a copy of toa-io/toa's contexts, manifests and
// feature files), read when it is beside the checkout, at ../shared/toa-examples, or where
// $TOA_EXAMPLES says. A clone alone has none: the tests that read them skip, and the project's own
// testdata applications cover the same features.
func toaExamples(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TOA_EXAMPLES")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "..", "shared", "toa-examples")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Skipf("Toa's examples are not beside the checkout (%s; set TOA_EXAMPLES): testdata/apps covers the same features", dir)
	}
	return dir
}

// copyExample copies one of Toa's own example contexts and installs a stand-in runtime version,
// as `npm install` would: they name no runtime version of their own.
func copyExample(t *testing.T, rel string) string {
	t.Helper()
	src := filepath.Join(toaExamples(t), rel)
	dst := t.TempDir()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dst, "node_modules/@toa.io/runtime/package.json"), `{"version":"1.0.0-alpha.289"}`)
	return dst
}

func TestTheIntegrationContext(t *testing.T) {
	dir := copyExample(t, "integration/context")
	app := load(t, dir, "dev")
	if got, want := compositionNames(app), []string{"messages", "dummies-a", "credits-balance"}; !reflect.DeepEqual(got, want) {
		t.Errorf("compositions %v, want %v", got, want)
	}
	if len(app.Warnings) != 1 || !strings.Contains(app.Warnings[0], "packages: is deprecated") {
		t.Errorf("warnings %v", app.Warnings)
	}
	if !app.Registry.PlatformsFromHost {
		t.Error("platforms@dev: ~ should build for the runner")
	}
	expo, _ := app.Annotation("@toa.io/extensions.exposition")
	m := expo.(map[string]any)
	if m["class"] != "nginx" || m["annotations"] != nil || m["authorities"].(map[string]any)["dev"] != "local.kind" {
		t.Errorf("exposition in dev: %v", m)
	}
	if mongo, _ := app.Annotation("@toa.io/storages.mongodb"); mongo != "mongodb://host.docker.internal" {
		t.Errorf("mongodb in dev: %v", mongo)
	}
	if c := app.Component("credits.balance"); c.Extensions[0].Package != "@toa.io/extensions.exposition" {
		t.Errorf("extensions by package name: %+v", c.Extensions)
	}

	app = load(t, dir, "staging")
	expo, _ = app.Annotation("@toa.io/extensions.exposition")
	m = expo.(map[string]any)
	if m["class"] != "alb" || m["authorities"].(map[string]any)["dev"] != "dummies.stage.toa.dev" || m["annotations"] == nil {
		t.Errorf("exposition in staging: %v", m)
	}
	if !reflect.DeepEqual(app.Registry.Platforms, DefaultPlatforms()) {
		t.Errorf("platforms in staging: %v", app.Registry.Platforms)
	}
}

func TestTheUserlandExample(t *testing.T) {
	app := load(t, copyExample(t, "userland/example"), "default")
	if got, want := compositionNames(app), []string{"default-echo", "math-calculations", "math-proxy", "tea-pots", "default-web"}; !reflect.DeepEqual(got, want) {
		t.Errorf("compositions %v, want %v", got, want)
	}
	if app.Registry.Base != "example" {
		t.Errorf("registry: example: %+v", app.Registry)
	}
	web := app.Component("default.web")
	if web == nil || web.Extensions[0].Package != "@toa.io/extensions.origins" {
		t.Fatalf("web: %+v", web)
	}
	echo := app.Component("default.echo")
	var pkgs []string
	for _, e := range echo.Extensions {
		pkgs = append(pkgs, e.Package)
	}
	if want := []string{"@toa.io/extensions.configuration", "@toa.io/extensions.state"}; !reflect.DeepEqual(pkgs, want) {
		t.Errorf("echo's extensions %v, want %v", pkgs, want)
	}
}

// The project's own application modelled on Toa's integration context: what
// TestTheIntegrationContext checks of Toa's, on a clone alone.
func TestTheDummies(t *testing.T) {
	dir := filepath.Join(apps, "dummies")
	app := load(t, dir, "dev")
	if got, want := compositionNames(app), []string{"messages", "dummies-a", "credits-balance"}; !reflect.DeepEqual(got, want) {
		t.Errorf("compositions %v, want %v", got, want)
	}
	if len(app.Warnings) != 1 || !strings.Contains(app.Warnings[0], "packages: is deprecated") {
		t.Errorf("warnings %v", app.Warnings)
	}
	if !app.Registry.PlatformsFromHost || app.Registry.Base != "localhost:5000" {
		t.Errorf("platforms@dev: ~ builds for the runner, base@dev: %+v", app.Registry)
	}
	if app.Runtime.Version != "0.0.0-test" {
		t.Errorf("the installed runtime's version: %s", app.Runtime.Version)
	}
	expo, _ := app.Annotation("@toa.io/extensions.exposition")
	m := expo.(map[string]any)
	if m["class"] != "nginx" || m["annotations"] != nil || m["authorities"].(map[string]any)["dummies"] != "dummies.localhost" {
		t.Errorf("exposition in dev: %v", m)
	}
	if mongo, _ := app.Annotation("@toa.io/storages.mongodb"); mongo != "mongodb://localhost" {
		t.Errorf("mongodb in dev: %v", mongo)
	}
	for _, id := range []string{"credits.balance", "dummies.a", "stats.stats"} {
		if c := app.Component(id); c == nil || c.Extensions[0].Package != "@toa.io/extensions.exposition" {
			t.Errorf("%s: the exposition, by package name, by shortcut or at the top level: %+v", id, c)
		}
	}

	app = load(t, dir, "staging")
	expo, _ = app.Annotation("@toa.io/extensions.exposition")
	m = expo.(map[string]any)
	if m["class"] != "alb" || m["authorities"].(map[string]any)["dummies"] != "dummies.staging.toa.test" || m["annotations"] == nil {
		t.Errorf("exposition in staging: %v", m)
	}
	if !reflect.DeepEqual(app.Registry.Platforms, DefaultPlatforms()) || app.Registry.Base != "registry.dummies.test" {
		t.Errorf("registry in staging: %+v", app.Registry)
	}
	// the annotation as the extension sees it: keys in the file's order, the override in place
	var raw json.RawMessage
	for _, a := range app.Annotations {
		if a.Package == "@toa.io/extensions.exposition" {
			raw = a.Raw
		}
	}
	if want := `{"authorities":{"dummies":"dummies.staging.toa.test"},"class":"alb","annotations":{"alb.ingress.kubernetes.io/scheme":"internet-facing","alb.ingress.kubernetes.io/target-type":"ip"}}`; string(raw) != want {
		t.Errorf("the exposition's annotation in the file's order:\n%s\nwant\n%s", raw, want)
	}
}

// The project's own application modelled on Toa's userland example: what TestTheUserlandExample
// checks of Toa's, on a clone alone.
func TestTheExamples(t *testing.T) {
	app := load(t, filepath.Join(apps, "examples"), "default")
	if got, want := compositionNames(app), []string{"default-echo", "math-calculations", "math-proxy", "tea-pots", "default-web"}; !reflect.DeepEqual(got, want) {
		t.Errorf("compositions %v, want %v", got, want)
	}
	if app.Registry.Base != "example" {
		t.Errorf("registry: example: %+v", app.Registry)
	}
	web := app.Component("default.web")
	if web == nil || web.Extensions[0].Package != "@toa.io/extensions.origins" {
		t.Fatalf("web: %+v", web)
	}
	echo := app.Component("default.echo")
	var pkgs []string
	for _, e := range echo.Extensions {
		pkgs = append(pkgs, e.Package)
	}
	if want := []string{"@toa.io/extensions.configuration", "@toa.io/extensions.state"}; !reflect.DeepEqual(pkgs, want) {
		t.Errorf("echo's extensions %v, want %v", pkgs, want)
	}
	if pots := app.Component("tea.pots"); pots.Storage != DefaultStorage || !reflect.DeepEqual(pots.Receivers, []Receiver{{Event: "store.orders.created", Binding: "amqp"}}) {
		t.Errorf("tea.pots: storage %s receivers %+v", pots.Storage, pots.Receivers)
	}
}

func TestNoEnvironmentDropsEveryOverride(t *testing.T) {
	app := load(t, filepath.Join(apps, "declared"), "")
	if app.Environment != "" || app.Registry.Base != "localhost:5000/acme" {
		t.Errorf("environment %q base %q", app.Environment, app.Registry.Base)
	}
}
