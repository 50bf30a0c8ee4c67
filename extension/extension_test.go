package extension

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/toa"
)

func needNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node on PATH")
	}
}

// The portal application: Toa's order of dependencies (connectors, then extensions, then the
// standalone ones annotated), the instances of each, the components an extension brings, and
// what each declares.
func TestResolveThePortal(t *testing.T) {
	needNode(t)
	app, err := toa.Load(filepath.Join("..", "testdata", "apps", "extended"), "hosted")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	instances := map[string][]string{}
	for _, d := range res.Dependencies {
		got = append(got, d.Reference)
		for _, c := range d.Instances {
			instances[d.Reference] = append(instances[d.Reference], c.Locator.ID)
		}
	}
	// the gateway the composition lists first; then the extensions in the order the components
	// name them, the predefined telemetry after each component's own
	want := []string{"@toa.io/storages.mongodb", "@toa.io/bindings.amqp", "@toa.io/extensions.exposition",
		"@toa.io/extensions.realtime", "@toa.io/extensions.configuration", "@toa.io/extensions.storages",
		"@toa.io/extensions.telemetry", "@toa.io/extensions.introspection"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dependencies\n%v\nwant\n%v", got, want)
	}
	for ref, ids := range map[string][]string{
		"@toa.io/bindings.amqp":            {"portal.accounts", "portal.audit", "portal.pages", "identity.tokens"},
		"@toa.io/extensions.configuration": {"portal.accounts", "identity.tokens"},
		"@toa.io/extensions.telemetry":     {"portal.accounts", "portal.audit", "portal.pages", "identity.tokens"},
		"@toa.io/extensions.exposition":    {"portal.pages"},
	} {
		if !reflect.DeepEqual(instances[ref], ids) {
			t.Errorf("%s: instances %v, want %v", ref, instances[ref], ids)
		}
	}
	if len(res.Components) != 1 || res.Components[0].Locator.ID != "identity.tokens" {
		t.Errorf("the exposition's own components: %v", res.Components)
	}
	last := res.Dependencies[len(res.Dependencies)-1]
	if !last.Standalone || last.Declaration == nil || len(last.Declaration.Services) != 1 || last.Declaration.Services[0].Port != 8002 {
		t.Errorf("introspection: %+v", last)
	}
	gateway := res.Dependencies[2].Declaration.Services[0]
	if gateway.FullName() != "exposition-gateway" || gateway.Port != 8000 || gateway.Probe == nil || gateway.Probe.Port != 8004 ||
		gateway.Ingress == nil || gateway.Ingress.Path != "/" || !reflect.DeepEqual(gateway.Ingress.Hosts, []string{"api.portal.example.com"}) ||
		!reflect.DeepEqual(gateway.Components, []string{"identity-tokens"}) || gateway.Version != "0.0.0-standin" {
		t.Errorf("gateway: %+v", gateway)
	}
	if d := res.Dependencies[2]; d.Name != "@toa.io/extensions.exposition" || !strings.HasSuffix(d.Dir, filepath.Join("packages", "extensions", "exposition")) && !strings.HasSuffix(d.Dir, filepath.Join("@toa.io", "extensions.exposition")) {
		t.Errorf("exposition installed at %s as %s", d.Dir, d.Name)
	}
	storages := res.Dependencies[5].Declaration
	if len(storages.Mounts) != 1 || storages.Mounts[0].Key != "portal-accounts" || storages.Mounts[0].Items[0].Claim != "portal-uploads" {
		t.Errorf("storages mounts: %+v", storages.Mounts)
	}
	configuration := res.Dependencies[4].Declaration.Variables
	if len(configuration) != 2 || configuration[1].Key != "identity-tokens" ||
		!reflect.DeepEqual(configuration[1].Items[1], Variable{Name: "TOA_CONFIGURATION__TOKENS_KEY", Secret: &SecretKey{Name: "toa-configuration", Key: "TOKENS_KEY"}}) {
		t.Errorf("configuration: %+v", configuration)
	}
	if probe := res.Dependencies[6].Declaration.Probe; probe == nil || *probe != (Probe{Path: "/.ready", Port: 8001, Delay: 3}) {
		t.Errorf("telemetry's probe: %+v", probe)
	}
	if events := res.Dependencies[3].Declaration.Events; !reflect.DeepEqual(events, []string{"portal.accounts.created"}) {
		t.Errorf("realtime's events: %v", events)
	}
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
