// Package diff shows what an apply would change, as kubectl diff does: a unified diff of each
// object's YAML, live against what the server-side dry run returned, and of what prune would
// delete. It reads a dry run's rollout.Result and talks to no cluster: a room of its own beside
// apply and wait, so that rollout holds only what changes the cluster.
package diff

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/rollout"
)

// ObjectDiff is how an object would change: a unified diff of its YAML, live against what the
// server-side dry run returned, managed fields, status and the counters of every write left out.
type ObjectDiff struct {
	rollout.Ref
	Change rollout.Change `json:"change"` // created, configured or pruned
	Diff   string         `json:"diff"`
	// Live and Merged are the two sides as YAML, Secrets masked; "" for the side an object
	// created or pruned lacks. File is kubectl diff's name of both: group.version.Kind.namespace.name.
	Live   string `json:"-"`
	Merged string `json:"-"`
	File   string `json:"-"`
}

// Pruned is the change of an object the apply would delete.
const Pruned rollout.Change = "pruned"

// Diffs are the differences a dry-run Result would make, object by object in apply order, then
// what prune would delete; objects that would not change are left out. Secrets' data is masked
// as kubectl diff masks it: every value "***", or "*** (before)" and "*** (after)" where it
// changes.
func Diffs(res *rollout.Result) ([]ObjectDiff, error) {
	var out []ObjectDiff
	for _, a := range res.Applied {
		d, err := objectDiff(a.Ref, a.Live, a.Object)
		if err != nil {
			return nil, err
		}
		if d.Diff != "" {
			d.Change = rollout.Configured
			if a.Live == nil {
				d.Change = rollout.Created
			}
			out = append(out, d)
		}
	}
	for i, ref := range res.Pruned {
		var live *unstructured.Unstructured
		if i < len(res.PrunedObjects) {
			live = res.PrunedObjects[i]
		}
		d, err := objectDiff(ref, live, nil)
		if err != nil {
			return nil, err
		}
		d.Change = Pruned
		out = append(out, d)
	}
	return out, nil
}

func objectDiff(ref rollout.Ref, live, merged *unstructured.Unstructured) (ObjectDiff, error) {
	from, to := comparable(live), comparable(merged)
	if ref.Group == "" && ref.Kind == "Secret" {
		maskSecrets(from, to)
	}
	a, err := yamlLines(from)
	if err != nil {
		return ObjectDiff{}, fmt.Errorf("diff %s: %w", ref, err)
	}
	b, err := yamlLines(to)
	if err != nil {
		return ObjectDiff{}, fmt.Errorf("diff %s: %w", ref, err)
	}
	name := diffName(ref)
	return ObjectDiff{Ref: ref, Diff: Unified("LIVE/"+name, "MERGED/"+name, a, b),
		Live: joinLines(a), Merged: joinLines(b), File: name}, nil
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// diffName is kubectl diff's file name of an object: group.version.Kind.namespace.name.
func diffName(r rollout.Ref) string {
	name := fmt.Sprintf("%s.%s.%s.%s", r.Version, r.Kind, r.Namespace, r.Name)
	if r.Group != "" {
		name = r.Group + "." + name
	}
	return name
}

// comparable is a copy of obj without what changes at every write (rollout.WithoutBookkeeping);
// nil for nil.
func comparable(obj *unstructured.Unstructured) map[string]any {
	if obj == nil {
		return nil
	}
	return rollout.WithoutBookkeeping(obj)
}

func maskSecrets(from, to map[string]any) {
	fromData, _, _ := unstructured.NestedMap(from, "data")
	toData, _, _ := unstructured.NestedMap(to, "data")
	for k, v := range fromData {
		if w, ok := toData[k]; ok && w != v {
			fromData[k], toData[k] = "*** (before)", "*** (after)"
			continue
		} else if ok {
			toData[k] = "***"
		}
		fromData[k] = "***"
	}
	for k := range toData {
		if _, ok := fromData[k]; !ok {
			toData[k] = "***"
		}
	}
	if fromData != nil {
		_ = unstructured.SetNestedMap(from, fromData, "data")
	}
	if toData != nil {
		_ = unstructured.SetNestedMap(to, toData, "data")
	}
}

func yamlLines(obj map[string]any) ([]string, error) {
	if obj == nil {
		return nil, nil
	}
	data, err := sigsyaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n"), nil
}

// edit is one line of an edit script: kept (' '), deleted from a ('-') or inserted from b ('+').
type edit struct {
	op   byte
	line string
}

// lineDiff is a shortest edit script from a to b (Myers' O(ND) algorithm, "An O(ND) Difference
// Algorithm and Its Variations", 1986), deletions before insertions where both are possible.
func lineDiff(a, b []string) []edit {
	n, m := len(a), len(b)
	// trace[d][k+d] is the furthest x reached on diagonal k = x-y with d edits
	var trace [][]int
	var end int
	for d := 0; ; d++ {
		v := make([]int, 2*d+1)
		for k := -d; k <= d; k += 2 {
			var x int
			switch {
			case d == 0:
				x = 0
			case k == -d || (k != d && trace[d-1][k-1+d-1] < trace[d-1][k+1+d-1]):
				x = trace[d-1][k+1+d-1] // down: insert b[y]
			default:
				x = trace[d-1][k-1+d-1] + 1 // right: delete a[x]
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[k+d] = x
			if x >= n && y >= m {
				trace = append(trace, v)
				end = d
				return backtrack(a, b, trace, end)
			}
		}
		trace = append(trace, v)
	}
}

func backtrack(a, b []string, trace [][]int, end int) []edit {
	var out []edit
	x, y := len(a), len(b)
	for d := end; d > 0; d-- {
		k := x - y
		prev := trace[d-1]
		var pk int
		if k == -d || (k != d && prev[k-1+d-1] < prev[k+1+d-1]) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := prev[pk+d-1]
		py := px - pk
		mx, my := px, py+1 // after an insertion
		if pk == k-1 {
			mx, my = px+1, py // after a deletion
		}
		for x > mx && y > my {
			x, y = x-1, y-1
			out = append(out, edit{' ', a[x]})
		}
		if pk == k-1 {
			out = append(out, edit{'-', a[px]})
		} else {
			out = append(out, edit{'+', b[py]})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		out = append(out, edit{' ', a[x]})
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// context is how many unchanged lines a hunk shows around a change, as diff -u.
const diffContext = 3

// Unified is the unified diff of a and b (lines without their newlines), in diff -u's format
// with the names given; "" when they are the same.
func Unified(fromName, toName string, a, b []string) string {
	script := lineDiff(a, b)
	var changes []int
	for i, e := range script {
		if e.op != ' ' {
			changes = append(changes, i)
		}
	}
	if len(changes) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", fromName, toName)
	// a hunk runs from diffContext lines before a change to diffContext after the last change
	// that is within 2*diffContext of the one before it
	for i := 0; i < len(changes); {
		j := i
		for j+1 < len(changes) && changes[j+1]-changes[j] <= 2*diffContext {
			j++
		}
		start, stop := max(0, changes[i]-diffContext), min(len(script), changes[j]+diffContext+1)
		writeHunk(&sb, script, start, stop)
		i = j + 1
	}
	return sb.String()
}

func writeHunk(sb *strings.Builder, script []edit, start, stop int) {
	// the line numbers where the hunk begins: lines of a and b before it, plus one
	aLine, bLine := 1, 1
	for _, e := range script[:start] {
		if e.op != '+' {
			aLine++
		}
		if e.op != '-' {
			bLine++
		}
	}
	aLen, bLen := 0, 0
	for _, e := range script[start:stop] {
		if e.op != '+' {
			aLen++
		}
		if e.op != '-' {
			bLen++
		}
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", hunkRange(aLine, aLen), hunkRange(bLine, bLen))
	for _, e := range script[start:stop] {
		sb.WriteByte(e.op)
		sb.WriteString(e.line)
		sb.WriteByte('\n')
	}
}

// hunkRange is diff -u's range: "start,len", "start" for one line, the line before for none.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
