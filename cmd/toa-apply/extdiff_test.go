package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/apply/diff"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// KUBECTL_EXTERNAL_DIFF's program gets the two folders kubectl diff gives it; its exit 1 is a
// difference, and what kubectl refuses (a shell in the arguments, no program) is bad input.
func TestExternalDiff(t *testing.T) {
	harness.Program(t, "diff", "install diffutils")
	diffs := []diff.ObjectDiff{
		{File: "apps.v1.Deployment.ns.carts", Live: "image: carts:v1\n", Merged: "image: carts:v4\n"},
		{File: "v1.Service.ns.carts", Live: "kind: Service\n"},
	}
	var out bytes.Buffer
	differ, err := externalDiff(context.Background(), "diff -u -N", diffs, &out)
	if err != nil || !differ {
		t.Fatalf("diff -u -N: differ %v, %v", differ, err)
	}
	for _, part := range []string{"-image: carts:v1", "+image: carts:v4", "/LIVE/v1.Service.ns.carts", "-kind: Service"} {
		if !strings.Contains(out.String(), part) {
			t.Errorf("the output lacks %q:\n%s", part, out.String())
		}
	}
	if differ, err := externalDiff(context.Background(), "diff -u -N", nil, &out); err != nil || differ {
		t.Errorf("no differences: differ %v, %v", differ, err)
	}
	for _, command := range []string{"", "diff -u;rm", "toa-no-such-diff -u"} {
		if _, err := externalDiff(context.Background(), command, diffs, &out); cli.ExitCode(err) != cli.ExitBadInput {
			t.Errorf("%q: exit %d (%v), want bad input", command, cli.ExitCode(err), err)
		}
	}
}
