package image

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// An image's base is taken, and its absence told, in one place for every kind of image: the
// base not resolved yet, or not resolvable, leaves the tags unresolved with the one wording and
// the application's platforms.
func TestTakeBase(t *testing.T) {
	app := &toa.Application{}
	app.Registry.Platforms = []string{"linux/amd64", "linux/arm64"}
	const ref = "localhost:5000/bases/node:test"
	for _, tt := range []struct {
		name       string
		bases      map[string]*Base
		ok         bool
		unresolved string
	}{
		{name: "resolved", bases: map[string]*Base{ref: fakeBase(ref, "linux/amd64")}, ok: true},
		{name: "not yet", unresolved: "the base " + ref + " is not resolved yet"},
		{name: "refused", bases: map[string]*Base{ref: {Ref: ref, Err: errors.New("connection refused")}},
			unresolved: "the base " + ref + " could not be resolved: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, img := range []*Image{{Name: "composition-a", Base: ref}, {Name: "service-b", Base: ref, Service: &Service{Name: "b"}}} {
				base, ok := img.takeBase(app, PlanOptions{Bases: tt.bases})
				if ok != tt.ok || (base != nil) != tt.ok || img.BaseSource != ref {
					t.Errorf("%s: %v, %v, source %q", img.Name, base, ok, img.BaseSource)
				}
				if tt.ok {
					continue
				}
				if !strings.HasPrefix(img.Unresolved, tt.unresolved) || !slices.Equal(img.Platforms, app.Registry.Platforms) {
					t.Errorf("%s: unresolved %q, platforms %v", img.Name, img.Unresolved, img.Platforms)
				}
			}
		})
	}
}
