package attest

import "fmt"

// ArtifactBuildType names how toa-push makes the kustomization's artifact (--artifact).
const ArtifactBuildType = "https://github.com/toa-deploy/toa-deploy/buildtypes/toa-push-artifact/v1"

// ArtifactBuild is what provenance says of the kustomization pushed as an OCI artifact: the
// artifact, the application it deploys, and the images it pins, which are its inputs.
type ArtifactBuild struct {
	Reference   string // where it was pushed: REPOSITORY:TAG
	Digest      string // its manifest's digest
	Context     string
	Environment string
	Images      []PinnedImage
}

// PinnedImage is an image the kustomization pins by digest.
type PinnedImage struct {
	Repository, Digest string
}

// Provenance is an in-toto statement (v1) about the artifact with a SLSA v1 provenance
// predicate: toa-push and its version as the builder, the context and environment as
// parameters, each image the kustomization pins as a resolved dependency by digest, so that a
// reader of the artifact's provenance finds the images' own provenance and SBOMs from it. No
// time is written: the same kustomization says the same thing.
func (a *ArtifactBuild) Provenance(builder Builder) ([]byte, error) {
	if a.Digest == "" || a.Reference == "" {
		return nil, fmt.Errorf("provenance needs the artifact's reference and digest")
	}
	st := statement{Type: StatementType, PredicateType: PredicateSLSAProvenance,
		Subject: []resourceDescriptor{{Name: a.Reference, Digest: hexDigest(a.Digest)}}}
	pred := &st.Predicate
	pred.BuildDefinition.BuildType = ArtifactBuildType
	ext := map[string]any{"context": a.Context, "artifact": a.Reference}
	if a.Environment != "" {
		ext["environment"] = a.Environment
	}
	pred.BuildDefinition.ExternalParameters = ext
	deps := []resourceDescriptor{}
	for _, img := range a.Images {
		deps = append(deps, resourceDescriptor{URI: "oci://" + img.Repository + "@" + img.Digest, Digest: hexDigest(img.Digest),
			Name: "image " + img.Repository})
	}
	pred.BuildDefinition.ResolvedDependencies = deps
	pred.RunDetails.Builder.ID = BuilderID
	pred.RunDetails.Builder.Version = map[string]string{builder.Name: builder.Version}
	return marshal(st)
}
