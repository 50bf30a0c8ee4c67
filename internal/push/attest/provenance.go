package attest

import (
	"fmt"
	"sort"
	"strings"
)

// Build is what provenance describes: one image of the application, built for every platform.
type Build struct {
	Name        string // "composition-front"
	Repository  string
	Tag         string
	Digest      string // the image index's digest
	Context     string // the Toa context's name
	Environment string // as toa-push was given it, "" for none
	Runtime     string // the runtime's version
	Platforms   []PlatformBuild
	Components  []BuildComponent
	Node, Npm   string // the runner's, which installed the dependencies
}

// PlatformBuild is one platform's image of a Build.
type PlatformBuild struct {
	Platform string
	Digest   string // its manifest's digest
	Base     Base
	// Dependencies is the dependencies image the image is built on, by its manifest's digest
	// ("" for none): it pins every layer of it, which Layers then leaves out.
	Dependencies string
	Layers       []Layer // the layers toa-push made, in order (over Dependencies, when given)
}

// Layer is one layer toa-push laid over the base.
type Layer struct {
	What   string // "node_modules of shop-orders", "sources", ...: the history entry
	Digest string
}

// BuildComponent is a component as provenance names it, with the digests of the files its
// install read.
type BuildComponent struct {
	ID, Version string
	Files       map[string]string // "package-lock.json" → "sha256:..."
}

// resourceDescriptor is in-toto's ResourceDescriptor (in-toto/attestation, spec/v1).
type resourceDescriptor struct {
	URI         string            `json:"uri,omitempty"`
	Digest      map[string]string `json:"digest,omitempty"`
	Name        string            `json:"name,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type statement struct {
	Type          string               `json:"_type"`
	Subject       []resourceDescriptor `json:"subject"`
	PredicateType string               `json:"predicateType"`
	Predicate     slsaProvenance       `json:"predicate"`
}

// slsaProvenance is SLSA's provenance predicate v1 (slsa.dev/spec/v1.0/provenance).
type slsaProvenance struct {
	BuildDefinition struct {
		BuildType            string               `json:"buildType"`
		ExternalParameters   map[string]any       `json:"externalParameters"`
		InternalParameters   map[string]any       `json:"internalParameters,omitempty"`
		ResolvedDependencies []resourceDescriptor `json:"resolvedDependencies"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID      string            `json:"id"`
			Version map[string]string `json:"version,omitempty"`
		} `json:"builder"`
		Metadata map[string]string `json:"metadata,omitempty"`
	} `json:"runDetails"`
}

// BuildType names how toa-push builds, for readers of its provenance.
const BuildType = "https://github.com/toa-deploy/toa-deploy/buildtypes/toa-push/v1"

// Provenance is an in-toto statement (v1) about the image index and each platform's image, with
// a SLSA v1 provenance predicate: the builder (toa-push and its version), the context, the
// environment and the platforms as parameters, the runner's node and npm, and every input by
// digest: each platform's base, the layers toa-push made, and the components' package.json and
// lockfiles. No time is written: the same build says the same thing.
func (b *Build) Provenance(builder Builder) ([]byte, error) {
	if b.Digest == "" || b.Repository == "" {
		return nil, fmt.Errorf("provenance needs the image's repository and digest")
	}
	st := statement{Type: StatementType, PredicateType: PredicateSLSAProvenance}
	st.Subject = append(st.Subject, resourceDescriptor{Name: b.Repository + ":" + b.Tag, Digest: hexDigest(b.Digest)})
	for _, p := range b.Platforms {
		// named by its repository: the digest beside it says which image of it
		st.Subject = append(st.Subject, resourceDescriptor{Name: b.Repository, Digest: hexDigest(p.Digest),
			Annotations: map[string]string{"platform": p.Platform}})
	}
	pred := &st.Predicate
	pred.BuildDefinition.BuildType = BuildType
	var platforms []string
	for _, p := range b.Platforms {
		platforms = append(platforms, p.Platform)
	}
	ext := map[string]any{"context": b.Context, "image": b.Name, "platforms": platforms, "runtime": b.Runtime}
	if b.Environment != "" {
		ext["environment"] = b.Environment
	}
	pred.BuildDefinition.ExternalParameters = ext
	internal := map[string]any{}
	if b.Node != "" {
		internal["node"] = b.Node
	}
	if b.Npm != "" {
		internal["npm"] = b.Npm
	}
	if len(internal) > 0 {
		pred.BuildDefinition.InternalParameters = internal
	}
	deps := []resourceDescriptor{}
	for _, p := range b.Platforms {
		if p.Base.Digest != "" {
			deps = append(deps, resourceDescriptor{URI: baseURI(p.Base), Digest: hexDigest(p.Base.Digest),
				Name: "base " + p.Platform, Annotations: map[string]string{"reference": p.Base.Reference}})
		}
		if p.Dependencies != "" {
			deps = append(deps, resourceDescriptor{Digest: hexDigest(p.Dependencies), Name: "dependencies image " + p.Platform})
		}
		for _, l := range p.Layers {
			deps = append(deps, resourceDescriptor{Digest: hexDigest(l.Digest), Name: "layer " + p.Platform + ": " + l.What})
		}
	}
	for _, c := range b.Components {
		files := make([]string, 0, len(c.Files))
		for f := range c.Files {
			files = append(files, f)
		}
		sort.Strings(files)
		for _, f := range files {
			deps = append(deps, resourceDescriptor{Digest: hexDigest(c.Files[f]), Name: "component " + c.ID + " " + c.Version + ": " + f})
		}
	}
	pred.BuildDefinition.ResolvedDependencies = deps
	pred.RunDetails.Builder.ID = BuilderID
	pred.RunDetails.Builder.Version = map[string]string{builder.Name: builder.Version}
	return marshal(st)
}

// hexDigest is "sha256:<hex>" as in-toto's digest set {"sha256": "<hex>"}.
func hexDigest(d string) map[string]string {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok {
		return nil
	}
	return map[string]string{alg: hex}
}

// baseURI is the base as an OCI reference by digest.
func baseURI(b Base) string {
	return "oci://" + b.Repository() + "@" + b.Digest
}
