package rollout

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PartlyAppliedError is an apply that stopped part-way: some objects were applied, others not
// (Result.NotApplied), and nothing was pruned. Its message says so, so that nobody takes the
// cluster for either the old application or the new one.
type PartlyAppliedError struct {
	Applied, Total int
	NotApplied     []Ref
	Err            error
}

func (e *PartlyAppliedError) Error() string {
	names := make([]string, 0, len(e.NotApplied))
	for _, r := range e.NotApplied {
		names = append(names, r.String())
	}
	return fmt.Sprintf("%v\nthe application is partly applied: %d of %d objects applied; not applied: %s; nothing was pruned. "+
		"Fix the cause and run toa-apply again, or roll back with toa-apply --rollback", e.Err, e.Applied, e.Total, strings.Join(names, ", "))
}

func (e *PartlyAppliedError) Unwrap() error { return e.Err }

// Conflict is one field another field manager owns.
type Conflict struct {
	Manager string `json:"manager"`
	Field   string `json:"field"`
}

// ConflictError is a server-side apply refused because other managers own fields the manifests
// set to other values.
type ConflictError struct {
	Object    Ref
	Conflicts []Conflict
}

func (e *ConflictError) Error() string {
	var managers []string
	fields := make([]string, 0, len(e.Conflicts))
	for _, c := range e.Conflicts {
		if m := strconv.Quote(c.Manager); !slices.Contains(managers, m) {
			managers = append(managers, m)
		}
		fields = append(fields, c.Field)
	}
	who := "another field manager"
	switch {
	case len(managers) == 1:
		who = "field manager " + managers[0]
	case len(managers) > 1:
		who = "field managers " + strings.Join(managers, ", ")
	}
	return fmt.Sprintf("apply %s: %s owns %s with other values; run again with --force-conflicts "+
		"to take them, or leave them out of the manifests", e.Object, who, strings.Join(fields, ", "))
}

var conflictManager = regexp.MustCompile(`conflict with "([^"]*)"`)

// conflicts reads the fields and managers of a 409 from server-side apply: a Status whose causes
// are FieldManagerConflict, each with the field and `conflict with "<manager>" ...`.
func conflicts(err error) []Conflict {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var out []Conflict
	for _, c := range status.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		manager := c.Message
		if m := conflictManager.FindStringSubmatch(c.Message); m != nil {
			manager = m[1]
		}
		out = append(out, Conflict{Manager: manager, Field: c.Field})
	}
	return out
}
