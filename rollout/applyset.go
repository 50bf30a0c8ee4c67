package rollout

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The ApplySet keys kubectl reads and writes (kubectl pkg/cmd/apply/applyset.go; the KEP's text
// says applyset.k8s.io, the code says applyset.kubernetes.io, and the code is what runs).
const (
	labelID             = "applyset.kubernetes.io/id"      // on the parent
	LabelPartOf         = "applyset.kubernetes.io/part-of" // on every member
	annotationTooling   = "applyset.kubernetes.io/tooling"
	annotationKinds     = "applyset.kubernetes.io/contains-group-kinds"
	annotationNamespace = "applyset.kubernetes.io/additional-namespaces"
	annotationResources = "applyset.kubernetes.io/contains-group-resources" // deprecated; read, never written
)

// LabelContext names the Toa context every object of an application carries.
const LabelContext = "toa/context"

// Tool is the tooling name of the ApplySets this package writes. kubectl refuses to change a set
// another tool owns, and so does this package.
const Tool = "toa-apply"

// FieldManager is the manager of every field this package applies.
const FieldManager = "toa"

// parentManager owns the parent's ApplySet fields, as kubectl's "<tool>-applyset" does.
const parentManager = FieldManager + "-applyset"

// Set is an application's ApplySet: its parent Secret and the id every member carries.
type Set struct {
	Name      string `json:"parent"` // the parent Secret: toa-<context>
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
}

// parentPrefix begins the name of every ApplySet parent toa-apply writes: toa-<context>.
const parentPrefix = "toa-"

// NewSet returns the ApplySet of the Toa context in the namespace.
func NewSet(context, namespace string) Set {
	name := parentPrefix + context
	return Set{Name: name, Namespace: namespace, ID: applySetID(name, namespace, "Secret", "")}
}

// Context is the Toa context whose ApplySet this is: its parent's name less the "toa-".
func (s Set) Context() string {
	context, _ := contextOf(s.Name)
	return context
}

// contextOf is the Toa context of an ApplySet parent named parent, and whether the name is one
// toa-apply gives (NewSet).
func contextOf(parent string) (string, bool) { return strings.CutPrefix(parent, parentPrefix) }

// applySetID is kubectl's id of an ApplySet whose parent has that name, namespace, kind and group:
// applyset-<base64url, unpadded, of sha256("<name>.<namespace>.<kind>.<group>")>-v1.
func applySetID(name, namespace, kind, group string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{name, namespace, kind, group}, ".")))
	return fmt.Sprintf("applyset-%s-v1", base64.RawURLEncoding.EncodeToString(sum[:]))
}

// toolingName is the tool part of a tooling annotation, "kubectl" of "kubectl/v1.35.0".
func toolingName(tooling string) string {
	if i := strings.LastIndex(tooling, "/"); i >= 0 {
		return tooling[:i]
	}
	return tooling
}

// kindsAnnotation writes group kinds as kubectl does: Kind.group, core kinds bare, sorted,
// comma-separated; "" is the empty set.
func kindsAnnotation(kinds []schema.GroupKind) string {
	out := make([]string, 0, len(kinds))
	for _, gk := range kinds {
		s := gk.String()
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// parseKinds reads a contains-group-kinds annotation.
func parseKinds(annotation string) []schema.GroupKind {
	var out []schema.GroupKind
	for _, s := range strings.Split(annotation, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, schema.ParseGroupKind(s))
		}
	}
	return out
}

// namespacesAnnotation writes the namespaces other than the parent's, sorted, comma-separated.
func namespacesAnnotation(namespaces []string, parent string) string {
	var out []string
	for _, ns := range namespaces {
		if ns != "" && ns != parent && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// parseNamespaces reads an additional-namespaces annotation.
func parseNamespaces(annotation string) []string {
	var out []string
	for _, s := range strings.Split(annotation, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
