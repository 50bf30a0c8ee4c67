package image

import (
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// dependencyBudget is how many layers each component's node_modules may take in an image over
// base, with global layers of npm i -g: what maxLayers leaves once a sources layer per
// component is set aside, shared evenly. It depends only on the base and the image's
// components, not on the lockfiles, so that a bump keeps every other package in its layer.
func dependencyBudget(base v1.Image, global, components int) int {
	if components == 0 {
		return 1
	}
	baseLayers := 0
	if m, err := base.Manifest(); err == nil {
		baseLayers = len(m.Layers)
	}
	return max(1, (maxLayers-baseLayers-global-components)/components)
}

// partHistory marks the history entries of a component's node_modules layers after the first
// (which holds npm's metadata, and so what the SBOM reads).
const partHistory = " (part "

// dependencyAddenda are the layers of a component's node_modules with their history: "node_modules
// of <label>" for the first, "node_modules of <label> (part 2 of 9)" for the others.
func dependencyAddenda(layers []v1.Layer, label string, created v1.Time) []mutate.Addendum {
	var adds []mutate.Addendum
	for i, l := range layers {
		what := "node_modules of " + label
		if i > 0 {
			what += fmt.Sprintf("%s%d of %d)", partHistory, i+1, len(layers))
		}
		adds = append(adds, addendum(l, what, created))
	}
	return adds
}

// IsDependencyPart is true for the history entry (what follows "toa-push: ") of a layer of
// node_modules after the first: it holds packages, none of npm's metadata.
func IsDependencyPart(what string) bool {
	return strings.HasPrefix(what, "node_modules of ") && strings.Contains(what, partHistory)
}
