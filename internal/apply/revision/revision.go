// Package revision keeps what each apply applied, in the cluster, as Helm keeps its releases:
// one Secret per revision, toa-<context>.v<N> beside the application's ApplySet parent, owned by
// it (deleting the parent deletes them), numbered from 1 and never overwritten. They are not
// members of the set: prune never sees them. A revision is marked deployed or failed (an apply
// the API server refused part-way, or whose rollout failed or timed out), and a rollback only
// ever goes to a deployed one.
//
// A revision is toa-apply's or refused: when one is recorded, a digest of it (the application,
// its number, its status, description and time, and its objects as stored) is written into an
// annotation of the parent, and a revision whose digest the parent does not hold is never used
// (bind.go). Whoever may create Secrets in the namespace but not change the parent cannot make
// toa-apply apply what they wrote. Objects are decoded within bounds (pack.go), and only to be
// used: listing the history or recording a new revision reads no old one's objects.
//
// This room reads what rollout applied and is read by the conductor (release); it sits beside
// apply and wait, not inside them.
package revision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// The labels and annotations of a revision Secret.
const (
	LabelRevisionOf       = "toa/revision-of" // the parent's name
	LabelRevision         = "toa/revision"    // the number
	annotationTime        = "toa/revision-time"
	annotationDescription = "toa/revision-description"
	annotationImages      = "toa/revision-images" // read: where revisions recorded before 2026-12 keep their images
	annotationTooling     = "toa/revision-tooling"
	annotationStatus      = "toa/revision-status"
	annotationObjects     = "toa/revision-objects"
	revisionType          = "toa/revision"
	revisionKey           = "objects.json.gz"
	imagesKey             = "images.txt.gz" // the images, one a line: an annotation of a thousand images' digests would pass the 256 KiB that a Secret's annotations hold
)

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// DefaultHistoryMax is how many revisions are kept unless told otherwise.
const DefaultHistoryMax = 10

// Status is how the apply a revision records ended, in Helm's words.
type Status string

// Statuses.
const (
	Deployed Status = "deployed" // applied whole and rolled out
	Failed   Status = "failed"   // refused part-way, or the rollout failed or timed out
)

// Revision is one recorded apply.
type Revision struct {
	Number      int       `json:"revision"`
	Time        time.Time `json:"time"`
	Description string    `json:"description"` // "apply", "rollback to 2"
	Status      Status    `json:"status"`
	Images      []string  `json:"images"` // the containers' images, by digest where pinned
	Objects     int       `json:"objects"`
	Tooling     string    `json:"tooling"` // toa-apply/<version>
	Secret      string    `json:"secret"`

	data   string // the objects as stored: base64 of gzipped JSON
	images string // the images as stored: base64 of gzipped lines; "" in a revision recorded before 2026-12
}

// Skipped is a Secret that looks like a revision of the application and is not one toa-apply
// recorded, or cannot be read: it is named, and never used.
type Skipped struct {
	Secret string `json:"secret"`
	Reason string `json:"reason"`
}

// History is an application's revisions, oldest first, and the Secrets that look like
// revisions and were skipped.
type History struct {
	Revisions []Revision
	Skipped   []Skipped
}

// RecordOptions tune Record.
type RecordOptions struct {
	Description string
	Version     string // toa-apply's
	Max         int    // revisions kept; DefaultHistoryMax when 0
	Status      Status // Deployed when ""
}

// Record keeps objects as the set's next revision, binds it to the parent, and deletes the
// oldest beyond opts.Max. It reads the old revisions' metadata, never their objects. A number
// taken meanwhile is an error, never an overwrite.
func Record(ctx context.Context, k *cluster.Client, set rollout.Set, objects []*unstructured.Unstructured, opts RecordOptions) (Revision, error) {
	return record(ctx, k, set, objects, opts, time.Now())
}

func record(ctx context.Context, k *cluster.Client, set rollout.Set, objects []*unstructured.Unstructured, opts RecordOptions, now time.Time) (Revision, error) {
	if opts.Max <= 0 {
		opts.Max = DefaultHistoryMax
	}
	if opts.Status == "" {
		opts.Status = Deployed
	}
	ri := k.Dynamic.Resource(secrets).Namespace(set.Namespace)
	parent, err := ri.Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		return Revision{}, fmt.Errorf("record the revision: read the ApplySet parent secret/%s: %w", set.Name, err)
	}
	old, err := list(ctx, k, set)
	if err != nil {
		return Revision{}, err
	}
	data, images, err := packAll(objects)
	if err != nil {
		return Revision{}, err
	}
	bound := digestsOf(parent)
	rev := Revision{Number: nextNumber(old, bound), Time: now.UTC().Truncate(time.Second), Description: opts.Description,
		Status: opts.Status, Images: imagesOf(objects), Objects: len(objects), Tooling: rollout.Tool + "/" + opts.Version,
		data: data, images: images}
	rev.Secret = secretName(set, rev.Number)

	// the oldest of toa-apply's own revisions beyond opts.Max go; what it did not record stays
	var own []int
	for _, s := range old {
		if n, ok := numberOf(set, &s); ok && bound[n] != "" {
			own = append(own, n)
		}
	}
	slices.Sort(own)
	drop := own[:max(0, len(own)+1-opts.Max)]
	keep := map[int]string{rev.Number: digest(set, rev)}
	for n, d := range bound {
		if !slices.Contains(drop, n) && slices.Contains(own, n) {
			keep[n] = d
		}
	}
	// bound first: a Secret without its digest in the parent is never used, so a run that stops
	// between the two leaves nothing that can be applied
	if err := bind(ctx, k, set, keep); err != nil {
		return Revision{}, err
	}
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": revisionType,
		"metadata": map[string]any{
			"name": rev.Secret, "namespace": set.Namespace,
			"labels": map[string]any{LabelRevisionOf: set.Name, LabelRevision: strconv.Itoa(rev.Number)},
			"annotations": map[string]any{
				annotationTime: rev.Time.Format(time.RFC3339), annotationDescription: rev.Description,
				annotationTooling: rev.Tooling, annotationStatus: string(rev.Status), annotationObjects: strconv.Itoa(rev.Objects),
			},
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Secret",
				"name": parent.GetName(), "uid": string(parent.GetUID())}},
		},
		"data": map[string]any{revisionKey: data, imagesKey: images},
	}}
	if _, err := ri.Create(ctx, secret, metav1.CreateOptions{FieldManager: rollout.FieldManager}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return Revision{}, fmt.Errorf("record revision %d: secret/%s already exists (another toa-apply recorded it at the same time, or it was written by hand): nothing was overwritten; see --history", rev.Number, rev.Secret)
		}
		return Revision{}, fmt.Errorf("record revision %d as secret/%s: %w", rev.Number, rev.Secret, err)
	}
	for _, n := range drop {
		err := ri.Delete(ctx, secretName(set, n), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return rev, fmt.Errorf("delete revision %d beyond --history-max %d: %w", n, opts.Max, err)
		}
	}
	return rev, nil
}

// nextNumber is one more than any number a revision Secret of the set or the parent has used, so
// that a number is never taken twice, even by a Secret toa-apply did not write.
func nextNumber(old []unstructured.Unstructured, bound map[int]string) int {
	n := 0
	for i := range old {
		if v, err := strconv.Atoi(old[i].GetLabels()[LabelRevision]); err == nil {
			n = max(n, v)
		}
		if _, v, ok := strings.Cut(old[i].GetName(), ".v"); ok {
			if v, err := strconv.Atoi(v); err == nil {
				n = max(n, v)
			}
		}
	}
	for v := range bound {
		n = max(n, v)
	}
	return n + 1
}

func secretName(set rollout.Set, n int) string { return fmt.Sprintf("%s.v%d", set.Name, n) }

// numberOf is the number of a revision Secret of the set: its label, which its name must agree
// with.
func numberOf(set rollout.Set, s *unstructured.Unstructured) (int, bool) {
	if t, _, _ := unstructured.NestedString(s.Object, "type"); t != revisionType || s.GetLabels()[LabelRevisionOf] != set.Name {
		return 0, false
	}
	n, err := strconv.Atoi(s.GetLabels()[LabelRevision])
	if err != nil || n < 1 || s.GetName() != secretName(set, n) {
		return 0, false
	}
	return n, true
}

// list is the Secrets labelled as the set's revisions.
func list(ctx context.Context, k *cluster.Client, set rollout.Set) ([]unstructured.Unstructured, error) {
	l, err := k.Dynamic.Resource(secrets).Namespace(set.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelRevisionOf + "=" + set.Name})
	if err != nil {
		return nil, fmt.Errorf("list the revisions of %s in namespace %s: %w", set.Name, set.Namespace, err)
	}
	return l.Items, nil
}

// Read lists the set's revisions, oldest first: those the parent holds the digest of. Any other
// Secret labelled as one is Skipped, with why. No revision's objects are decoded.
func Read(ctx context.Context, k *cluster.Client, set rollout.Set) (History, error) {
	items, err := list(ctx, k, set)
	if err != nil {
		return History{}, err
	}
	var h History
	if len(items) == 0 {
		return h, nil
	}
	parent, err := k.Dynamic.Resource(secrets).Namespace(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return History{}, fmt.Errorf("read the ApplySet parent secret/%s: %w", set.Name, err)
	}
	bound := map[int]string{}
	if err == nil {
		bound = digestsOf(parent)
	}
	for i := range items {
		s := &items[i]
		n, ok := numberOf(set, s)
		if !ok {
			h.Skipped = append(h.Skipped, Skipped{Secret: s.GetName(), Reason: fmt.Sprintf("its type, labels and name are not those of a revision of %s", set.Name)})
			continue
		}
		r := revisionOf(s, n)
		if why := verify(set, r, bound); why != "" {
			h.Skipped = append(h.Skipped, Skipped{Secret: s.GetName(), Reason: why})
			continue
		}
		if r.images != "" {
			if r.Images, err = unpackImages(r.images); err != nil {
				h.Skipped = append(h.Skipped, Skipped{Secret: s.GetName(), Reason: err.Error()})
				continue
			}
		}
		h.Revisions = append(h.Revisions, r)
	}
	slices.SortFunc(h.Revisions, func(a, b Revision) int { return a.Number - b.Number })
	slices.SortFunc(h.Skipped, func(a, b Skipped) int { return strings.Compare(a.Secret, b.Secret) })
	return h, nil
}

// revisionOf reads a revision Secret's metadata.
func revisionOf(s *unstructured.Unstructured, n int) Revision {
	a := s.GetAnnotations()
	when, _ := time.Parse(time.RFC3339, a[annotationTime])
	objects, _ := strconv.Atoi(a[annotationObjects])
	r := Revision{Number: n, Time: when, Description: a[annotationDescription], Status: Status(a[annotationStatus]),
		Tooling: a[annotationTooling], Secret: s.GetName(), Objects: objects}
	r.data, _, _ = unstructured.NestedString(s.Object, "data", revisionKey)
	r.images, _, _ = unstructured.NestedString(s.Object, "data", imagesKey)
	if a[annotationImages] != "" {
		r.Images = strings.Split(a[annotationImages], ",")
	}
	return r
}

// ErrNoRevision is a rollback with nothing to go back to.
var ErrNoRevision = errors.New("no revision to roll back to")

// Pick is the revision a rollback goes to: number n, or for 0 the latest deployed one before the
// latest revision (what `helm rollback` goes back to). A failed revision is never picked.
func (h History) Pick(set rollout.Set, n int) (Revision, error) {
	revs := h.Revisions
	if n == 0 {
		for i := len(revs) - 2; i >= 0; i-- {
			if revs[i].Status != Failed {
				return revs[i], nil
			}
		}
		return Revision{}, fault.BadInput(fmt.Errorf("%w: %s in namespace %s has %s recorded, and none deployed before the latest", ErrNoRevision, set.Name, set.Namespace, count(len(revs), "revision")))
	}
	i := slices.IndexFunc(revs, func(r Revision) bool { return r.Number == n })
	if i < 0 {
		var have []string
		for _, r := range revs {
			have = append(have, strconv.Itoa(r.Number))
		}
		for _, s := range h.Skipped {
			if s.Secret == secretName(set, n) {
				return Revision{}, fmt.Errorf("%w: secret/%s is not a revision toa-apply recorded: %s", ErrNoRevision, s.Secret, s.Reason)
			}
		}
		return Revision{}, fault.BadInput(fmt.Errorf("%w: %s in namespace %s has no revision %d (it has: %s; see --history)", ErrNoRevision, set.Name, set.Namespace, n, strings.Join(have, ", ")))
	}
	if revs[i].Status == Failed {
		return Revision{}, fault.BadInput(fmt.Errorf("%w: revision %d of %s is a failed apply: roll back to a deployed one (see --history)", ErrNoRevision, n, set.Name))
	}
	return revs[i], nil
}

// LatestDeployed is the latest deployed revision, for a rollback after a failed apply.
func (h History) LatestDeployed() (Revision, bool) {
	for i := len(h.Revisions) - 1; i >= 0; i-- {
		if h.Revisions[i].Status != Failed {
			return h.Revisions[i], true
		}
	}
	return Revision{}, false
}

// Decode decodes a revision's objects, within bounds. The revision is one Read verified.
func (r Revision) Decode() ([]*unstructured.Unstructured, error) {
	objects, err := unpack(r.data)
	if err != nil {
		return nil, fmt.Errorf("read revision %d (secret/%s): %w", r.Number, r.Secret, err)
	}
	return objects, nil
}

// DeleteAll deletes the set's revisions, after its parent, which owns them: a run stopped in
// between leaves them to the garbage collector.
func DeleteAll(ctx context.Context, k *cluster.Client, set rollout.Set) error {
	items, err := list(ctx, k, set)
	if err != nil {
		return err
	}
	for i := range items {
		if _, ok := numberOf(set, &items[i]); !ok {
			continue
		}
		err := k.Dynamic.Resource(secrets).Namespace(set.Namespace).Delete(ctx, items[i].GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete revision secret/%s of %s: %w", items[i].GetName(), set.Name, err)
		}
	}
	return nil
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

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
