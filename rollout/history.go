package rollout

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/toa-deploy/toa-deploy/fault"
)

// Revisions are what each successful apply applied, kept in the cluster as Helm keeps its
// releases: one Secret per revision, toa-<context>.v<N> beside the ApplySet parent, owned by it
// (deleting the parent deletes them), numbered from 1. They are not members of the set: prune
// never sees them.
const (
	LabelRevisionOf       = "toa/revision-of" // the parent's name
	LabelRevision         = "toa/revision"    // the number
	annotationTime        = "toa/revision-time"
	annotationDescription = "toa/revision-description"
	annotationImages      = "toa/revision-images"
	annotationTooling     = "toa/revision-tooling"
	revisionType          = "toa/revision"
	revisionKey           = "objects.json.gz"
)

// DefaultHistoryMax is how many revisions are kept unless told otherwise.
const DefaultHistoryMax = 10

// maxRevisionSize bounds a revision's objects: compressed, what a Secret holds (1 MiB, less
// what its metadata takes); expanded, what a reader takes in.
const (
	maxRevisionSize = 900 << 10
	maxExpanded     = 64 << 20
)

// Revision is one recorded apply.
type Revision struct {
	Number      int       `json:"revision"`
	Time        time.Time `json:"time"`
	Description string    `json:"description"` // "apply", "rollback to 2"
	Images      []string  `json:"images"`      // the containers' images, by digest where pinned
	Objects     int       `json:"objects"`
	Tooling     string    `json:"tooling"` // toa-apply/<version>
	Secret      string    `json:"secret"`
}

// RecordOptions tune Record.
type RecordOptions struct {
	Description string
	Version     string // toa-apply's
	Max         int    // revisions kept; DefaultHistoryMax when 0
}

// Record keeps objects as the set's next revision, and deletes the oldest beyond opts.Max.
func Record(ctx context.Context, cfg *rest.Config, set Set, objects []*unstructured.Unstructured, opts RecordOptions) (Revision, error) {
	c, err := newClient(cfg)
	if err != nil {
		return Revision{}, err
	}
	return record(ctx, c, set, objects, opts, time.Now())
}

func record(ctx context.Context, c *client, set Set, objects []*unstructured.Unstructured, opts RecordOptions, now time.Time) (Revision, error) {
	if opts.Max <= 0 {
		opts.Max = DefaultHistoryMax
	}
	parent, err := c.dyn.Resource(secrets).Namespace(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		return Revision{}, fmt.Errorf("record the revision: read the ApplySet parent secret/%s: %w", set.Name, err)
	}
	old, err := history(ctx, c, set)
	if err != nil {
		return Revision{}, err
	}
	data, err := packObjects(objects)
	if err != nil {
		return Revision{}, err
	}
	rev := Revision{Number: 1, Time: now.UTC().Truncate(time.Second), Description: opts.Description,
		Images: imagesOf(objects), Objects: len(objects), Tooling: Tool + "/" + opts.Version}
	if len(old) > 0 {
		rev.Number = old[len(old)-1].Number + 1
	}
	rev.Secret = fmt.Sprintf("%s.v%d", set.Name, rev.Number)
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": revisionType,
		"metadata": map[string]any{
			"name": rev.Secret, "namespace": set.Namespace,
			"labels": map[string]any{LabelRevisionOf: set.Name, LabelRevision: strconv.Itoa(rev.Number)},
			"annotations": map[string]any{
				annotationTime: rev.Time.Format(time.RFC3339), annotationDescription: rev.Description,
				annotationImages: strings.Join(rev.Images, ","), annotationTooling: rev.Tooling,
			},
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Secret",
				"name": parent.GetName(), "uid": string(parent.GetUID())}},
		},
		"data": map[string]any{revisionKey: data},
	}}
	if _, err := c.dyn.Resource(secrets).Namespace(set.Namespace).Create(ctx, secret, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		return Revision{}, fmt.Errorf("record revision %d as secret/%s: %w", rev.Number, rev.Secret, err)
	}
	for _, r := range old[:max(0, len(old)+1-opts.Max)] {
		err := c.dyn.Resource(secrets).Namespace(set.Namespace).Delete(ctx, r.Secret, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return rev, fmt.Errorf("delete revision %d beyond --history-max %d: %w", r.Number, opts.Max, err)
		}
	}
	return rev, nil
}

// packObjects is the objects as a JSON list, gzipped, base64 as a Secret's data is.
func packObjects(objects []*unstructured.Unstructured) (string, error) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	list := make([]map[string]any, 0, len(objects))
	for _, obj := range objects {
		list = append(list, obj.Object)
	}
	if err := json.NewEncoder(zw).Encode(list); err != nil {
		return "", fmt.Errorf("encode the revision's objects: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if b.Len() > maxRevisionSize {
		return "", fmt.Errorf("the application's objects take %d KiB compressed, more than a Secret holds (%d KiB): the revision cannot be recorded", b.Len()>>10, maxRevisionSize>>10)
	}
	return encodeBase64(b.Bytes()), nil
}

// History lists the set's revisions, oldest first.
func History(ctx context.Context, cfg *rest.Config, set Set) ([]Revision, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return history(ctx, c, set)
}

func history(ctx context.Context, c *client, set Set) ([]Revision, error) {
	list, err := c.dyn.Resource(secrets).Namespace(set.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelRevisionOf + "=" + set.Name})
	if err != nil {
		return nil, fmt.Errorf("list the revisions of %s in namespace %s: %w", set.Name, set.Namespace, err)
	}
	var out []Revision
	for _, s := range list.Items {
		if t, _, _ := unstructured.NestedString(s.Object, "type"); t != revisionType || s.GetLabels()[LabelRevisionOf] != set.Name {
			continue
		}
		n, err := strconv.Atoi(s.GetLabels()[LabelRevision])
		if err != nil || n < 1 {
			continue
		}
		a := s.GetAnnotations()
		when, _ := time.Parse(time.RFC3339, a[annotationTime])
		r := Revision{Number: n, Time: when, Description: a[annotationDescription], Tooling: a[annotationTooling], Secret: s.GetName()}
		if a[annotationImages] != "" {
			r.Images = strings.Split(a[annotationImages], ",")
		}
		if objs, err := unpack(&s); err == nil {
			r.Objects = len(objs)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Revision) int { return a.Number - b.Number })
	return out, nil
}

// ErrNoRevision is a rollback with nothing to go back to.
var ErrNoRevision = errors.New("no revision to roll back to")

// LoadRevision reads the objects of a revision of the set: number n, or for 0 the one before
// the latest (what `helm rollback` goes back to).
func LoadRevision(ctx context.Context, cfg *rest.Config, set Set, n int) (Revision, []*unstructured.Unstructured, error) {
	c, err := newClient(cfg)
	if err != nil {
		return Revision{}, nil, err
	}
	return loadRevision(ctx, c, set, n)
}

func loadRevision(ctx context.Context, c *client, set Set, n int) (Revision, []*unstructured.Unstructured, error) {
	revs, err := history(ctx, c, set)
	if err != nil {
		return Revision{}, nil, err
	}
	var rev Revision
	switch i := slices.IndexFunc(revs, func(r Revision) bool { return r.Number == n }); {
	case n == 0 && len(revs) < 2:
		return Revision{}, nil, fault.BadInput(fmt.Errorf("%w: %s in namespace %s has %s recorded", ErrNoRevision, set.Name, set.Namespace, count(len(revs), "revision")))
	case n == 0:
		rev = revs[len(revs)-2]
	case i < 0:
		var have []string
		for _, r := range revs {
			have = append(have, strconv.Itoa(r.Number))
		}
		return Revision{}, nil, fault.BadInput(fmt.Errorf("%w: %s in namespace %s has no revision %d (it has: %s; see --history)", ErrNoRevision, set.Name, set.Namespace, n, strings.Join(have, ", ")))
	default:
		rev = revs[i]
	}
	s, err := c.dyn.Resource(secrets).Namespace(set.Namespace).Get(ctx, rev.Secret, metav1.GetOptions{})
	if err != nil {
		return rev, nil, fmt.Errorf("read revision %d (secret/%s): %w", rev.Number, rev.Secret, err)
	}
	objects, err := unpack(s)
	if err != nil {
		return rev, nil, fmt.Errorf("read revision %d (secret/%s): %w", rev.Number, rev.Secret, err)
	}
	return rev, objects, nil
}

// unpack reads a revision Secret's objects.
func unpack(s *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	encoded, _, _ := unstructured.NestedString(s.Object, "data", revisionKey)
	raw, err := decodeBase64(encoded)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", revisionKey, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", revisionKey, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxExpanded+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", revisionKey, err)
	}
	if len(data) > maxExpanded {
		return nil, fmt.Errorf("%s expands to more than %d MiB", revisionKey, maxExpanded>>20)
	}
	var list []map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", revisionKey, err)
	}
	out := make([]*unstructured.Unstructured, 0, len(list))
	for _, m := range list {
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// imagesOf are the images the objects' containers run, sorted, each once.
func imagesOf(objects []*unstructured.Unstructured) []string {
	var out []string
	paths := [][]string{{"spec", "template", "spec"}, {"spec", "jobTemplate", "spec", "template", "spec"}, {"spec"}}
	for _, obj := range objects {
		for _, p := range paths {
			for _, field := range []string{"initContainers", "containers"} {
				list, _, _ := unstructured.NestedSlice(obj.Object, append(slices.Clone(p), field)...)
				for _, c := range list {
					if m, ok := c.(map[string]any); ok {
						if image, ok := m["image"].(string); ok && image != "" {
							out = append(out, image)
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Applications are the Toa contexts toa-apply has applied to the namespace: the names of its
// ApplySet parents there, less the "toa-".
func Applications(ctx context.Context, cfg *rest.Config, namespace string) ([]string, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return applications(ctx, c, namespace)
}

func applications(ctx context.Context, c *client, namespace string) ([]string, error) {
	list, err := c.dyn.Resource(secrets).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelID})
	if err != nil {
		return nil, fmt.Errorf("list the applications in namespace %s: %w", namespace, err)
	}
	var out []string
	for _, s := range list.Items {
		name, ok := strings.CutPrefix(s.GetName(), "toa-")
		if ok && toolingName(s.GetAnnotations()[AnnotationTooling]) == Tool && s.GetLabels()[LabelID] == NewSet(name, namespace).ID {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// deleteRevisions deletes the set's revisions, with its parent.
func deleteRevisions(ctx context.Context, c *client, set Set) error {
	revs, err := history(ctx, c, set)
	if err != nil {
		return err
	}
	for _, r := range revs {
		err := c.dyn.Resource(secrets).Namespace(set.Namespace).Delete(ctx, r.Secret, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete revision %d of %s: %w", r.Number, set.Name, err)
		}
	}
	return nil
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
