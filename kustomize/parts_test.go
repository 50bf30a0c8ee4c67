package kustomize

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/kio"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// kindsFixture has objects of many kinds, some namespaced and some not, in several files, an
// object kustomize drops (local-config), labels that reach selectors and annotations: parts cut
// across kinds and files, and kustomize's order must come back.
func kindsFixture(n int) map[string]string {
	var rbac, more []string
	for i := range n {
		rbac = append(rbac,
			fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa-%03d}\n", n-i),
			fmt.Sprintf("apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: rb-%03d}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}\nsubjects: [{kind: ServiceAccount, name: sa-%03d}]\n", i, i),
			fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: s-%03d, namespace: other}\nstringData: {k: v}\n", i))
		more = append(more,
			fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w-%03d}\nspec: {size: %d}\n", i, i),
			fmt.Sprintf("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: pdb-%03d}\nspec: {minAvailable: 1, selector: {matchLabels: {app: a%03d}}}\n", i, i))
	}
	more = append(more, "apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local, annotations: {config.kubernetes.io/local-config: \"true\"}}\n",
		"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: vwc}\n")
	files := compositionsFixture(n)
	files["kustomization.yaml"] = strings.Replace(files["kustomization.yaml"], "resources: [service.yaml, deployment.yaml]",
		"resources: [more.yaml, service.yaml, rbac.yaml, deployment.yaml]\ncommonLabels: {team: a}\ncommonAnnotations: {owner: b}", 1)
	files["rbac.yaml"] = strings.Join(rbac, "---\n")
	files["more.yaml"] = strings.Join(more, "---\n")
	return files
}

// Render renders a kustomization that ties no object to another in parts, and the objects, and
// their order before Render sorts them, are exactly kustomize's whole render; a kustomization
// whose objects depend on each other, or one kustomize refuses, is rendered whole.
func TestRenderInParts(t *testing.T) {
	withPrefix := maps.Clone(compositionsFixture(60))
	withPrefix["kustomization.yaml"] += "namePrefix: x-\n"
	withList := kindsFixture(40)
	withList["more.yaml"] += "---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: listed-a}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: listed-b}}\n"
	// documents as people write them: JSON, a separator with a comment after it, a comment alone,
	// CRLF line ends, a file without a last line end, a scalar holding "---" indented
	odd := kindsFixture(40)
	odd["more.yaml"] = "# a comment before the first document\n" + odd["more.yaml"] +
		"---\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"json\"}}\n" +
		"---\n# a document of a comment alone\n" +
		"--- # a marker's comment\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: block}\ndata:\n  text: |\n    ---\n    not a marker\n" +
		"---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: crlf}\r\n" +
		"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: last}"
	escaped := kindsFixture(40)
	escaped["more.yaml"] += "---\napiVersion: v1\nkind: \"Lis\\u0074\"\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: listed-a}}\n"
	twice := compositionsFixture(60)
	twice["kustomization.yaml"] = strings.Replace(twice["kustomization.yaml"], "resources: [service.yaml, deployment.yaml]",
		"resources: [service.yaml, deployment.yaml, again.yaml]", 1)
	twice["again.yaml"] = strings.SplitN(twice["deployment.yaml"], "---\n", 2)[0]
	for _, tc := range []struct {
		name   string
		files  map[string]string
		parted bool
	}{
		{"compositions as toa-push writes them", compositionsFixture(120), true},
		{"many kinds, files, a local object, common labels", kindsFixture(40), true},
		{"a name prefix, which name references follow", withPrefix, false},
		{"a List, whose items kustomize puts at its file's end", withList, false},
		{"documents as people write them", odd, true},
		{"a List whose kind is written with an escape", escaped, false},
		{"an object twice, in two parts", twice, true}, // parted, then refused: rendered whole for kustomize's words
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := inMemory(t, tc.files)
			ctx := context.Background()
			d, deferred := deferImages(fs, dir)
			if !deferred {
				t.Fatal("images not deferred")
			}
			parts, partsErr := renderInParts(ctx, fs, d, 25)
			whole, wholeErr := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
			got, gotErr := Render(ctx, fs, dir, func(o *options) { o.partSize = 25 })
			if wholeErr != nil {
				var input *fault.Input
				if !errors.Is(partsErr, errNotPartable) || !errors.As(gotErr, &input) || !strings.Contains(gotErr.Error(), "may not add resource with an already registered id") {
					t.Fatalf("kustomize refuses it (%v): in parts %v, Render %v; want errNotPartable and kustomize's words", wholeErr, partsErr, gotErr)
				}
				return
			}
			if !tc.parted {
				if !errors.Is(partsErr, errNotPartable) {
					t.Fatalf("rendered in parts: %v", partsErr)
				}
			} else {
				if partsErr != nil {
					t.Fatal(partsErr)
				}
				if err := d.applyImages(whole); err != nil {
					t.Fatal(err)
				}
				var a, b []string
				for _, r := range parts {
					a = append(a, r.CurId().String())
				}
				for _, r := range whole.Resources() {
					b = append(b, r.CurId().String())
				}
				if strings.Join(a, "\n") != strings.Join(b, "\n") {
					t.Errorf("in parts, the order is not kustomize's:\n--- parts\n%s\n--- kustomize\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
				}
			}
			if gotErr != nil {
				t.Fatal(gotErr)
			}
			m, err := render(ctx, fs, dir, options{client: RemoteClient()}, false)
			if err != nil {
				t.Fatal(err)
			}
			want, err := objectsOf(m, dir)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := string(yamlOf(t, got)), string(yamlOf(t, want)); a != b {
				t.Errorf("Render differs from kustomize's whole render:\n--- Render\n%s\n--- kustomize\n%s", a, b)
			}
		})
	}
}

// A kustomization of fewer than two parts is rendered whole.
func TestTooFewForParts(t *testing.T) {
	fs, dir := inMemory(t, compositionsFixture(10))
	d, deferred := deferImages(fs, dir)
	if !deferred || !d.partable {
		t.Fatalf("deferred %v, partable %v", deferred, d != nil && d.partable)
	}
	if _, err := renderInParts(context.Background(), fs, d, 20); !errors.Is(err, errNotPartable) {
		t.Fatalf("20 documents in parts of 20: %v, want errNotPartable", err)
	}
}

// documents cuts where kustomize cuts, and hasList finds a List however its kind is written.
func TestDocumentsAndLists(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		docs       int
		list       bool
	}{
		{"plain", "a: 1\n---\nb: 2\n", 2, false},
		{"a first marker, a comment after one", "---\na: 1\n--- # two\nb: 2\n", 2, false},
		{"white space between markers", "a: 1\n---\n\n---\nb: 2", 2, false},
		{"a marker indented in a block scalar", "a: |\n  ---\n  b\n---\nc: 3\n", 2, false},
		{"a List", "kind: ConfigMap\n---\nkind: List\nitems: []\n", 2, true},
		// two documents each: kustomize unwraps a List that is its stream's one document
		{"a List in JSON", "a: 1\n---\n{\"kind\": \"PodList\", \"items\": []}\n", 2, true},
		{"a List behind an escape", "a: 1\n---\nkind: \"Lis\\u0074\"\nitems: []\n", 2, true},
		{"a List behind an anchor", "a: 1\n---\na: &k SecretList\nkind: *k\n", 2, true},
		{"no List", "kind: Deployment\nmetadata: {name: ListOfThings}\n", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(documents([]byte(tc.text))); got != tc.docs {
				t.Errorf("%d documents, want %d", got, tc.docs)
			}
			nodes, err := kio.FromBytes([]byte(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if len(nodes) != tc.docs {
				t.Errorf("kustomize reads %d documents, the test says %d", len(nodes), tc.docs)
			}
			if list, err := hasList(tc.text); list != tc.list || err != nil {
				t.Errorf("hasList: %v, %v; want %v", list, err, tc.list)
			}
		})
	}
}
