package extension

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

func needNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node on PATH")
	}
}

// The portal application: Toa's order of dependencies (connectors, then extensions in the order
// the components meet them, each component's predefined telemetry first, then the standalone
// ones annotated), the instances of each, the components the extensions bring, and what each
// declares.
func TestResolveThePortal(t *testing.T) {
	needNode(t)
	app, err := toa.Load(filepath.Join("..", "..", "..", "testdata", "apps", "extended"), "hosted")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	byRef := map[string]*Dependency{}
	instances := map[string][]string{}
	for _, d := range res.Dependencies {
		got = append(got, d.Reference)
		byRef[d.Reference] = d
		for _, c := range d.Instances {
			instances[d.Reference] = append(instances[d.Reference], c.Locator.ID)
		}
	}
	// the gateway the composition lists first; then the extensions in the order the components
	// name them, telemetry first; state, which the streams component names; the explorer last
	want := []string{"@toa.io/storages.mongodb", "@toa.io/bindings.amqp", "@toa.io/extensions.exposition",
		"@toa.io/extensions.telemetry", "@toa.io/extensions.realtime", "@toa.io/extensions.configuration",
		"@toa.io/extensions.storages", "@toa.io/extensions.state", "@toa.io/extensions.introspection"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dependencies\n%v\nwant\n%v", got, want)
	}
	for ref, ids := range map[string][]string{
		// portal.pages has operations but no entity: no storage; the streams push nothing through a binding but create
		"@toa.io/storages.mongodb":         {"portal.accounts", "identity.tokens"},
		"@toa.io/bindings.amqp":            {"portal.accounts", "portal.audit", "portal.pages", "identity.tokens", "realtime.streams"},
		"@toa.io/extensions.configuration": {"portal.accounts", "identity.tokens"},
		"@toa.io/extensions.telemetry":     {"portal.accounts", "portal.audit", "portal.pages", "identity.tokens", "realtime.streams"},
		"@toa.io/extensions.exposition":    {"portal.pages", "identity.tokens", "realtime.streams"},
		"@toa.io/extensions.state":         {"realtime.streams"},
	} {
		if !reflect.DeepEqual(instances[ref], ids) {
			t.Errorf("%s: instances %v, want %v", ref, instances[ref], ids)
		}
	}
	var own []string
	for _, c := range res.Components {
		own = append(own, c.Locator.ID)
	}
	if !reflect.DeepEqual(own, []string{"identity.tokens", "realtime.streams"}) {
		t.Errorf("the extensions' own components: %v", own)
	}
	if d := byRef["@toa.io/extensions.introspection"]; !d.Standalone || d.Declaration == nil || len(d.Declaration.Services) != 1 || d.Declaration.Services[0].Port != 8002 {
		t.Errorf("introspection: %+v", d)
	}
	gateway := byRef["@toa.io/extensions.exposition"].Declaration.Services[0]
	if gateway.FullName() != "exposition-gateway" || gateway.Port != 8000 || gateway.Probe == nil || gateway.Probe.Port != 8004 ||
		gateway.Ingress == nil || gateway.Ingress.Path != "/" || !reflect.DeepEqual(gateway.Ingress.Hosts, []string{"api.portal.example.com"}) ||
		!reflect.DeepEqual(gateway.Components, []string{"identity-tokens"}) || gateway.Version != "0.0.0-standin" {
		t.Errorf("gateway: %+v", gateway)
	}
	// the gateway's own tree is the annotation's; the components' trees are not in it
	if names := variableNames(gateway.Variables); !reflect.DeepEqual(names, []string{"TOA_EXPOSITION_PROPERTIES", "TOA_TELEMETRY_READY"}) {
		t.Errorf("gateway variables %v", names)
	}
	if d := byRef["@toa.io/extensions.exposition"]; d.Name != "@toa.io/extensions.exposition" || !strings.HasSuffix(d.Dir, filepath.Join("packages", "extensions", "exposition")) {
		t.Errorf("exposition installed at %s as %s", d.Dir, d.Name)
	}
	storages := byRef["@toa.io/extensions.storages"].Declaration
	if len(storages.Mounts) != 1 || storages.Mounts[0].Key != "portal-accounts" || storages.Mounts[0].Items[0].Claim != "portal-uploads" {
		t.Errorf("storages mounts: %+v", storages.Mounts)
	}
	if v := storages.Variables[0].Items[0]; v.Name != "TOA_STORAGES" || v.Value != `{"uploads":{"provider":"fs","path":"/var/portal/uploads","claim":"portal-uploads"}}` {
		t.Errorf("TOA_STORAGES, the annotation in the file's order: %+v", v)
	}
	configuration := byRef["@toa.io/extensions.configuration"].Declaration.Variables
	if len(configuration) != 2 || configuration[1].Key != "identity-tokens" ||
		!reflect.DeepEqual(configuration[1].Items[1], Variable{Name: "TOA_CONFIGURATION__TOKENS_KEY", Secret: &SecretKey{Name: "toa-configuration", Key: "TOKENS_KEY"}}) {
		t.Errorf("configuration: %+v", configuration)
	}
	telemetry := byRef["@toa.io/extensions.telemetry"].Declaration
	if probe := telemetry.Probe; probe == nil || *probe != (Probe{Path: "/.ready", Port: 8001}) {
		t.Errorf("telemetry's probe: %+v", probe)
	}
	if ready := telemetry.Variables[0].Items[1]; ready.Name != "TOA_TELEMETRY_READY" || ready.Value != `{"enabled":true,"path":"/.ready","port":8001}` {
		t.Errorf("telemetry's ready variable: %+v", ready)
	}
	if events := byRef["@toa.io/extensions.realtime"].Declaration.Events; !reflect.DeepEqual(events, []string{"portal.accounts.created"}) {
		t.Errorf("realtime's events: %v", events)
	}
	if streams := byRef["@toa.io/extensions.realtime"].Declaration.Services[0]; !reflect.DeepEqual(streams.Components, []string{"realtime-streams"}) {
		t.Errorf("the streams' components: %v", streams.Components)
	}
	if res.Started != 1 {
		t.Errorf("%d node processes for one run", res.Started)
	}
}

func variableNames(vs []Variable) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

// Every failure names the package and says what to do.
func TestResolveErrors(t *testing.T) {
	needNode(t)
	good := map[string]string{
		"@toa.io/bindings.amqp":        "exports.deployment = () => ({ variables: { global: [{ name: 'A', value: 1 }] } })",
		"@toa.io/extensions.telemetry": "exports.deployment = () => ({})",
	}
	for _, tc := range []struct {
		name     string
		context  string
		packages map[string]string
		want     []string
	}{
		{"no node_modules", "", nil, []string{"there is no node_modules beside it", "run `npm install` in the context's folder first"}},
		{"not installed", "", map[string]string{"@toa.io/bindings.amqp": good["@toa.io/bindings.amqp"]},
			[]string{"'@toa.io/extensions.telemetry' is not installed in the context's node_modules; shop.orders use(s) it", "run `npm install`"}},
		{"throws", "", map[string]string{"@toa.io/bindings.amqp": "exports.deployment = () => { throw new Error('amqp annotation is required') }",
			"@toa.io/extensions.telemetry": good["@toa.io/extensions.telemetry"]},
			[]string{"@toa.io/bindings.amqp: deployment() threw: amqp annotation is required"}},
		{"not an object", "", map[string]string{"@toa.io/bindings.amqp": "exports.deployment = () => 'variables'",
			"@toa.io/extensions.telemetry": good["@toa.io/extensions.telemetry"]},
			[]string{"@toa.io/bindings.amqp: deployment() returned a string, not an object"}},
		{"a port that is no number", "", map[string]string{"@toa.io/bindings.amqp": "exports.deployment = () => ({ services: [{ group: 'a', name: 'b', port: '8000' }] })",
			"@toa.io/extensions.telemetry": good["@toa.io/extensions.telemetry"]},
			[]string{"@toa.io/bindings.amqp: deployment() returned what toa-push cannot read: services[0]: port is a string, not a number"}},
		{"does not load", "", map[string]string{"@toa.io/bindings.amqp": "syntax error(",
			"@toa.io/extensions.telemetry": good["@toa.io/extensions.telemetry"]},
			[]string{"@toa.io/bindings.amqp: cannot be loaded: SyntaxError"}},
		{"a composition lists what is not installed", "compositions:\n  - name: edge\n    components: [shop.orders]\n    services: [exposition]\n", good,
			[]string{"compositions: Composition 'edge' lists '@toa.io/extensions.exposition', which cannot be resolved: '@toa.io/extensions.exposition' is not installed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeApp(t, tc.context, tc.packages)
			app, err := toa.Load(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = Resolve(context.Background(), app)
			var e *fault.Input
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *fault.Input", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// A package that logs to standard output does not spoil the answer.
func TestResolveIgnoresWhatPackagesPrint(t *testing.T) {
	needNode(t)
	dir := writeApp(t, "", map[string]string{
		"@toa.io/bindings.amqp":        "console.log('{\"not\":\"json\"'); exports.deployment = () => { process.stdout.write('noise'); return { variables: { global: [{ name: 'A', value: 'b' }] } } }",
		"@toa.io/extensions.telemetry": "exports.deployment = () => ({ probe: false })",
	})
	app, err := toa.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Dependencies) != 2 || res.Dependencies[0].Declaration.Variables[0].Items[0].Value != "b" || !res.Dependencies[1].Declaration.NoProbe {
		t.Errorf("%+v", res.Dependencies)
	}
}

// annotation() replaces the context's annotation, with the instances at hand, before deployment()
// sees it; a package the context does not annotate is not asked.
func TestAnnotationHook(t *testing.T) {
	needNode(t)
	dir := writeApp(t, "amqp: amqp://rabbitmq\n", map[string]string{
		"@toa.io/bindings.amqp": `exports.annotation = (a, instances) => ({ uri: a, users: instances.map((i) => i.locator.label) })
exports.deployment = (_, a) => ({ variables: { global: [{ name: 'A', value: JSON.stringify(a) }] } })`,
		"@toa.io/extensions.telemetry": "exports.annotation = () => { throw new Error('not annotated, not asked') }\nexports.deployment = () => ({})",
	})
	app, err := toa.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Dependencies[0].Declaration.Variables[0].Items[0].Value; got != `{"uri":"amqp://rabbitmq","users":["shop-orders"]}` {
		t.Errorf("deployment() saw %s", got)
	}
}

// writeApp writes a context of one component, shop.orders, with the packages given installed.
func writeApp(t *testing.T, extra string, packages map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"context.toa.yaml":                         "name: shop\nruntime: 1.0.0\nregistry: localhost:5000\n" + extra,
		"components/shop.orders/manifest.toa.yaml": "operations:\n  transit: ~\n",
	}
	for name, js := range packages {
		files["node_modules/"+name+"/package.json"] = `{"name": "` + name + `", "version": "1.0.0"}`
		files["node_modules/"+name+"/index.js"] = js
	}
	for name, data := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// standins links the stand-in packages named (folders of testdata/packages/extensions) under the
// application's node_modules, as `npm install` of their file: paths would, with the pointer
// library the connectors need.
func standins(t *testing.T, dir string, names map[string]string) {
	t.Helper()
	base, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "packages", "extensions"))
	if err != nil {
		t.Fatal(err)
	}
	names["@toa.io/pointer"] = "pointer"
	for pkg, folder := range names {
		link := filepath.Join(dir, "node_modules", filepath.FromSlash(pkg))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(base, folder), link); err != nil {
			t.Fatal(err)
		}
	}
}

// A component with `storages: tmp`: the storages extension's manifest() makes it ['tmp'] before
// its deployment() sees it, as Toa's norm does.
func TestStoragesTmp(t *testing.T) {
	needNode(t)
	dir := writeApp(t, "amqp: amqp://rabbitmq\nstorages:\n  tmp:\n    provider: tmp\n    directory: test\n", nil)
	write(t, dir, "components/shop.orders/manifest.toa.yaml", "operations:\n  put:\n    input: string\nstorages: tmp\n")
	standins(t, dir, map[string]string{"@toa.io/extensions.storages": "storages", "@toa.io/extensions.telemetry": "telemetry",
		"@toa.io/bindings.amqp": "amqp"})
	app, err := toa.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	storages := find(res, "@toa.io/extensions.storages")
	if storages == nil || storages.Declaration == nil || len(storages.Declaration.Mounts) != 0 ||
		storages.Declaration.Variables[0].Items[0].Value != `{"tmp":{"provider":"tmp","directory":"test"}}` {
		t.Fatalf("storages: %+v", storages)
	}
}

// A component with neither operations nor events uses no binding: no amqp dependency, and no
// amqp annotation is needed (Toa's connectors.js).
func TestNoOperationsNoBinding(t *testing.T) {
	needNode(t)
	dir := writeApp(t, "", nil)
	write(t, dir, "components/shop.orders/manifest.toa.yaml", "name: orders\nnamespace: shop\nconfiguration:\n  greeting: string\n")
	standins(t, dir, map[string]string{"@toa.io/extensions.configuration": "configuration", "@toa.io/extensions.telemetry": "telemetry"})
	app, err := toa.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, d := range res.Dependencies {
		refs = append(refs, d.Reference)
	}
	if want := []string{"@toa.io/extensions.telemetry", "@toa.io/extensions.configuration"}; !reflect.DeepEqual(refs, want) {
		t.Errorf("dependencies %v, want %v", refs, want)
	}
}

// What a manifest() hook throws is the component's manifest's error: it names the file, the
// section and the package.
func TestManifestHookErrors(t *testing.T) {
	needNode(t)
	dir := writeApp(t, "", map[string]string{
		"@toa.io/bindings.amqp":        "exports.deployment = () => ({})",
		"@toa.io/extensions.telemetry": "exports.deployment = () => ({})",
		"@toa.io/extensions.realtime":  "exports.manifest = (d) => { if (typeof d !== 'object') throw new Error('Realtime declaration must be an object'); return d }",
	})
	write(t, dir, "components/shop.orders/manifest.toa.yaml", "operations:\n  transit: ~\nrealtime: created\n")
	app, err := toa.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resolve(context.Background(), app)
	var e *fault.Input
	if !errors.As(err, &e) {
		t.Fatalf("%v is not a *fault.Input", err)
	}
	if e.File != filepath.Join(dir, "components", "shop.orders", "manifest.toa.yaml") || e.Key != "realtime" ||
		!strings.Contains(e.Message, "@toa.io/extensions.realtime: manifest() threw: Realtime declaration must be an object") {
		t.Errorf("%+v", e)
	}
}

// The Helm charts a package asks for are said, with what to do; the rest is deployed.
func TestReferencesAreSaid(t *testing.T) {
	needNode(t)
	dir := writeApp(t, "", map[string]string{
		"@toa.io/bindings.amqp": `exports.deployment = () => ({ references: [{ name: 'rabbitmq', version: '12.0.0', repository: 'oci://registry-1.docker.io/bitnamicharts' }],
  variables: { global: [{ name: 'A', value: 'a' }] } })`,
		"@toa.io/extensions.telemetry": "exports.deployment = () => ({})",
	})
	app, err := toa.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "@toa.io/bindings.amqp asks for the Helm chart rabbitmq 12.0.0") ||
		!strings.Contains(res.Warnings[0], "helm install rabbitmq oci://registry-1.docker.io/bitnamicharts/rabbitmq --version 12.0.0") {
		t.Errorf("warnings %q", res.Warnings)
	}
	if res.Dependencies[0].Declaration.Variables[0].Items[0].Value != "a" {
		t.Errorf("the rest is deployed: %+v", res.Dependencies[0].Declaration)
	}
}

// Values as Toa's chart wrote them (`{{ if .value }}{{ .value | quote }}`, of what Helm read from
// values.yaml): false and 0 are no value, true is "true", numbers as Go prints Helm's float64;
// an extension's resources take numbers as the context's do.
func TestValuesAsTheChartWritesThem(t *testing.T) {
	needNode(t)
	dir := writeApp(t, "", map[string]string{
		"@toa.io/bindings.amqp": `exports.deployment = () => ({ variables: { global: [
  { name: 'T', value: true }, { name: 'F', value: false }, { name: 'Z', value: 0 }, { name: 'N', value: 8001 },
  { name: 'H', value: 0.5 }, { name: 'M', value: 1000000 }, { name: 'E', value: '' }] },
  services: [{ group: 'a', name: 'b', resources: { cpu: [0.5, 1], memory: ['128Mi', '256Mi'] } }] })`,
		"@toa.io/extensions.telemetry": "exports.deployment = () => ({})",
	})
	app, err := toa.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	decl := res.Dependencies[0].Declaration
	got := map[string]string{}
	for _, v := range decl.Variables[0].Items {
		got[v.Name] = v.Value
	}
	want := map[string]string{"T": "true", "F": "", "Z": "", "N": "8001", "H": "0.5", "M": "1e+06", "E": ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values %v, want %v", got, want)
	}
	if r := decl.Services[0].Resources; r == nil || *r.CPU != (toa.Pair{Request: "0.5", Limit: "1"}) || r.Memory.Limit != "256Mi" {
		t.Errorf("resources %+v", r)
	}
}

// One node process answers a whole run, however many questions it asks (the portal asks five:
// the components' sections, the extensions of three rounds, the declarations).
func TestOneProcessPerRun(t *testing.T) {
	needNode(t)
	count := filepath.Join(t.TempDir(), "count")
	node := countingNode(t, count)
	app, err := toa.Load(filepath.Join("..", "..", "..", "testdata", "apps", "extended"), "hosted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(context.Background(), app, WithNode(node)); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(count); len(data) != 1 {
		t.Errorf("%d node processes", len(data))
	}
}

// With a cache, a run that asks what an earlier one asked starts no node, and gets the same
// answers; a change to a package, to a manifest or to an annotation asks node again.
func TestCache(t *testing.T) {
	needNode(t)
	count := filepath.Join(t.TempDir(), "count")
	node := countingNode(t, count)
	cache := t.TempDir()
	dir := writeApp(t, "amqp: amqp://rabbitmq\nconfiguration:\n  shop.orders:\n    greeting: hello\n", nil)
	write(t, dir, "components/shop.orders/manifest.toa.yaml", "operations:\n  transit: ~\nconfiguration:\n  greeting: string\n")
	// a copy of the configuration stand-in, to change it
	pkg := filepath.Join(dir, "node_modules", "@toa.io", "extensions.configuration")
	for _, f := range []string{"index.js", "package.json"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "packages", "extensions", "configuration", f))
		if err != nil {
			t.Fatal(err)
		}
		write(t, dir, filepath.Join("node_modules", "@toa.io", "extensions.configuration", f), string(data))
	}
	standins(t, dir, map[string]string{"@toa.io/extensions.telemetry": "telemetry", "@toa.io/bindings.amqp": "amqp"})
	resolve := func() (*Result, int) {
		t.Helper()
		os.Remove(count)
		app, err := toa.Load(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		res, err := Resolve(context.Background(), app, WithNode(node), WithCache(cache))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(count)
		return res, len(data)
	}
	configuration := func(res *Result) string {
		return find(res, "@toa.io/extensions.configuration").Declaration.Variables[0].Items[0].Value
	}
	first, started := resolve()
	if started != 1 || first.Started != 1 || configuration(first) != `{"greeting":"hello"}` {
		t.Fatalf("first run: %d processes, %s", started, configuration(first))
	}
	second, started := resolve()
	if started != 0 || second.Started != 0 {
		t.Errorf("a run with nothing changed started %d node processes", started)
	}
	if !reflect.DeepEqual(summary(first), summary(second)) {
		t.Errorf("the cached answers differ:\n%v\n%v", summary(first), summary(second))
	}
	// the package changes: its code now writes another value
	js := filepath.Join(pkg, "index.js")
	data, _ := os.ReadFile(js)
	os.WriteFile(js, []byte(strings.Replace(string(data), "value: JSON.stringify(values)", "value: 'changed'", 1)), 0o644)
	if res, started := resolve(); started != 1 || configuration(res) != "changed" {
		t.Errorf("after a package changed: %d processes, %s", started, configuration(res))
	}
	if _, started := resolve(); started != 0 {
		t.Errorf("the new answers are not cached: %d processes", started)
	}
	write(t, dir, "context.toa.yaml", "name: shop\nruntime: 1.0.0\nregistry: localhost:5000\namqp: amqp://rabbitmq\nconfiguration:\n  shop.orders:\n    greeting: hi\n")
	if _, started := resolve(); started != 1 {
		t.Errorf("after an annotation changed: %d processes", started)
	}
	write(t, dir, "components/shop.orders/manifest.toa.yaml", "operations:\n  transit: ~\n  get: ~\nconfiguration:\n  greeting: string\n")
	if _, started := resolve(); started != 1 {
		t.Errorf("after a manifest changed: %d processes", started)
	}
	// a code change is a new version of the component, which no package here reads
	write(t, dir, "components/shop.orders/lib/helper.js", "module.exports = 1\n")
	if res, started := resolve(); started != 0 || configuration(res) != "changed" {
		t.Errorf("after a code change no package reads: %d processes, %s", started, configuration(res))
	}
	// a package that reads the version is asked again after each code change
	data, _ = os.ReadFile(js)
	os.WriteFile(js, []byte(strings.Replace(string(data), "value: 'changed'", "value: instance.component.version", 1)), 0o644)
	res, started := resolve()
	if started != 1 || configuration(res) == "changed" {
		t.Errorf("after the package began reading the version: %d processes, %s", started, configuration(res))
	}
	before := configuration(res)
	write(t, dir, "components/shop.orders/lib/helper.js", "module.exports = 2\n")
	if res, started := resolve(); started != 1 || configuration(res) == before {
		t.Errorf("after a code change a package reads: %d processes, version %s, before %s", started, configuration(res), before)
	}
	if _, started := resolve(); started != 0 {
		t.Errorf("the answers that read a version are not cached: %d processes", started)
	}
}

// summary is what a Result says, for comparing two.
func summary(res *Result) []string {
	var out []string
	for _, d := range res.Dependencies {
		var ids []string
		for _, c := range d.Instances {
			ids = append(ids, c.Locator.ID)
		}
		decl, _ := json.Marshal(d.Declaration)
		out = append(out, fmt.Sprintf("%s %s %s %v %v %s", d.Reference, d.Version, d.Dir, ids, d.Standalone, decl))
	}
	for _, c := range res.Components {
		out = append(out, c.Path)
	}
	return append(out, res.Warnings...)
}

// countingNode is a node that notes each start in file count.
func countingNode(t *testing.T, count string) string {
	t.Helper()
	real, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH")
	}
	script := filepath.Join(t.TempDir(), "node")
	write(t, filepath.Dir(script), "node", "#!/bin/sh\nprintf x >> '"+count+"'\nexec '"+real+"' \"$@\"\n")
	os.Chmod(script, 0o755)
	return script
}

func find(res *Result, ref string) *Dependency {
	for _, d := range res.Dependencies {
		if d.Reference == ref {
			return d
		}
	}
	return nil
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
