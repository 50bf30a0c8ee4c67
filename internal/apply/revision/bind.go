package revision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// AnnotationDigests, on the ApplySet parent, binds the revisions to it: "N=sha256:HEX" for each
// revision kept, comma-separated. A revision Secret is used only when its digest is there.
const AnnotationDigests = "toa/revisions"

// digestManager owns AnnotationDigests on the parent, beside the ApplySet's own fields.
const digestManager = rollout.FieldManager + "-revisions"

// digest is what binds a revision to its parent: a sha256 of the application, the number, the
// status, description and time, the objects as stored (their base64 text, hashed before
// anything is decoded) and the images as stored, where the revision stores them (a revision
// recorded before 2026-12 kept them in an annotation, outside the digest, and keeps its digest).
func digest(set rollout.Set, r Revision) string {
	h := sha256.New()
	parts := []string{"toa-apply revision", set.Namespace, set.Name, strconv.Itoa(r.Number), string(r.Status),
		r.Description, r.Time.UTC().Format(time.RFC3339), r.data}
	if r.images != "" {
		parts = append(parts, r.images)
	}
	for _, part := range parts {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// verify says why a revision read from its Secret is not one toa-apply recorded for the set, ""
// when it is.
func verify(set rollout.Set, r Revision, bound map[int]string) string {
	want, ok := bound[r.Number]
	switch {
	case !ok:
		return fmt.Sprintf("the ApplySet parent secret/%s holds no digest of revision %d (annotation %s): it was not recorded by toa-apply, or was recorded before revisions were bound", set.Name, r.Number, AnnotationDigests)
	case len(r.data) > maxEncoded:
		return fmt.Sprintf("its objects take %d KiB, more than a revision holds (%d KiB)", len(r.data)>>10, maxEncoded>>10)
	case len(r.images) > maxEncodedImages:
		return fmt.Sprintf("its images take %d KiB, more than a revision holds (%d KiB)", len(r.images)>>10, maxEncodedImages>>10)
	case digest(set, r) != want:
		return fmt.Sprintf("its content does not match the digest the ApplySet parent secret/%s holds: it was changed after toa-apply recorded it", set.Name)
	}
	return ""
}

// digestsOf reads AnnotationDigests of the parent; what does not parse is left out.
func digestsOf(parent *unstructured.Unstructured) map[int]string {
	out := map[int]string{}
	for _, entry := range strings.Split(parent.GetAnnotations()[AnnotationDigests], ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(entry), "=")
		n, err := strconv.Atoi(k)
		if ok && err == nil && n > 0 && strings.HasPrefix(v, "sha256:") {
			out[n] = v
		}
	}
	return out
}

// bind writes the digests of the revisions kept into the parent, under a field manager of its
// own, so that the ApplySet's server-side applies, which never name it, leave it alone.
func bind(ctx context.Context, k *cluster.Client, set rollout.Set, digests map[int]string) error {
	numbers := make([]int, 0, len(digests))
	for n := range digests {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	entries := make([]string, 0, len(numbers))
	for _, n := range numbers {
		entries = append(entries, fmt.Sprintf("%d=%s", n, digests[n]))
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{AnnotationDigests: strings.Join(entries, ",")}}})
	if err != nil {
		return err
	}
	// a merge patch of the one annotation: the ApplySet's own server-side applies own the rest
	_, err = k.Dynamic.Resource(secrets).Namespace(set.Namespace).Patch(ctx, set.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: digestManager})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("record the revision: the ApplySet parent secret/%s is gone", set.Name)
	}
	if err != nil {
		return fmt.Errorf("record the revision: bind it to the ApplySet parent secret/%s: %w", set.Name, err)
	}
	return nil
}
