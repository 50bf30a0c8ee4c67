package manifest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/extension"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
)

// Toa's example contexts render as Toa 289 renders them. Toa's own (its integration context and
// its userland example, of 1.0.0-alpha.110) declare no resources, which 289 refuses, word for
// word; with `resources: null` added they render. The project's own applications modelled on
// them (testdata/apps/dummies and examples) declare resources, and render; both are asserted the
// same things: the compositions, declared and derived, the environment's overrides, the
// connectors' and extensions' variables, the gateway's ingress.
func TestExampleContexts(t *testing.T) {
	type example struct {
		name, dir, env string
		check          func(t *testing.T, o map[string]Object)
	}
	dummies := func(host string) func(t *testing.T, o map[string]Object) {
		return func(t *testing.T, o map[string]Object) {
			wantWorkloads(t, o, "composition-credits-balance", "composition-dummies-a", "composition-messages", "extension-exposition-gateway")
			d := deploymentNamed(t, o, "composition-messages")
			if l := d.Spec.Template.Labels; l["toa/component-messages-messages"] != "1" || l["toa/component-stats-stats"] != "1" {
				t.Errorf("the declared composition's components: %v", l)
			}
			wantEnv(t, o, "composition-messages", value("TOA_ENV", "dev"))
			in, ok := o["Ingress/extension-exposition-gateway"].(*networkingv1.Ingress)
			if !ok {
				t.Fatal("no Ingress of the gateway")
			}
			if in.Spec.IngressClassName == nil || *in.Spec.IngressClassName != "nginx" || len(in.Annotations) != 0 ||
				len(in.Spec.Rules) != 1 || in.Spec.Rules[0].Host != host {
				t.Errorf("the gateway's ingress in dev: class nginx, no annotations, host %s: %+v", host, in)
			}
		}
	}
	userland := func(t *testing.T, o map[string]Object) {
		wantWorkloads(t, o, "composition-default-echo", "composition-default-web", "composition-math-calculations",
			"composition-math-proxy", "composition-tea-pots")
		wantEnv(t, o, "composition-default-web",
			value("TOA_ORIGINS_DEFAULT_WEB_DEV", "http://localhost"),
			// msgpack of {}: the component has no `.http` properties
			value("TOA_ORIGINS_DEFAULT_WEB__PROPERTIES", "gA=="))
		wantEnv(t, o, "composition-tea-pots",
			value("TOA_MONGODB_TEA_POTS", "mongodb://localhost"),
			secret("TOA_MONGODB_TEA_POTS_USERNAME", "toa-mongodb.default", "username"),
			value("TOA_AMQP_CONTEXT", `{".":["amqp://localhost"]}`))
		noEnv(t, o, "composition-default-echo", "TOA_MONGODB_DEFAULT_ECHO")
		if img := containerOf(t, o, "composition-default-echo").Image; !strings.HasPrefix(img, "example/examples/composition-default-echo:") {
			t.Errorf("`registry: example` is the base: %s", img)
		}
	}
	examples := []example{
		{"testdata/apps/dummies", filepath.Join("..", "testdata", "apps", "dummies"), "dev", dummies("dummies.localhost")},
		{"testdata/apps/examples", filepath.Join("..", "testdata", "apps", "examples"), "default", userland},
		// the same, on Toa's own contexts when they are beside the checkout
		{"toa-examples/integration/context", filepath.Join("integration", "context"), "dev", dummies("local.kind")},
		{"toa-examples/userland/example", filepath.Join("userland", "example"), "default", userland},
	}
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			dir := ex.dir
			if strings.HasPrefix(ex.name, "toa-examples/") {
				dir = t.TempDir()
				copyTree(t, filepath.Join(toaExamples(t), ex.dir), dir)
				installStandins(t, dir)
				// as Toa 289: a composition without resources is refused
				_, err := renderContext(t, dir, ex.env)
				var e *fault.Input
				if !errors.As(err, &e) || !strings.Contains(e.Message, "declares no resources. Declare them on it or as the context's "+
					"'resources', or 'resources: null' to deploy it without any.") {
					t.Fatalf("without resources: %v", err)
				}
				f, err := os.OpenFile(filepath.Join(dir, "context.toa.yaml"), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteString("\nresources: null\n")
				f.Close()
			}
			objects, err := renderContext(t, dir, ex.env)
			if err != nil {
				t.Fatal(err)
			}
			ex.check(t, objects)
		})
	}
}

// renderContext renders the context in dir for env, its extensions asked.
func renderContext(t *testing.T, dir, env string) (map[string]Object, error) {
	t.Helper()
	harness.Program(t, "node", nodeInstall)
	app, err := toa.Load(dir, env)
	if err != nil {
		return nil, err
	}
	res, err := extension.Resolve(context.Background(), app)
	if err != nil {
		return nil, err
	}
	deps := Merge(res)
	plan, err := image.NewPlan(app, image.PlanOptions{Services: serviceImagesOf(app, deps, false)})
	if err != nil {
		return nil, err
	}
	objects, err := Objects(app, planned(plan, false, fakeTag), WithDependencies(deps))
	if err != nil {
		return nil, err
	}
	out := map[string]Object{}
	for _, o := range objects {
		out[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = o
	}
	return out, nil
}

// wantWorkloads asserts the Deployments rendered, by name.
func wantWorkloads(t *testing.T, o map[string]Object, names ...string) {
	t.Helper()
	var got []string
	for k := range o {
		if name, ok := strings.CutPrefix(k, "Deployment/"); ok {
			got = append(got, name)
		}
	}
	sort.Strings(got)
	sort.Strings(names)
	if !reflect.DeepEqual(got, names) {
		t.Errorf("Deployments %v, want %v", got, names)
	}
}
