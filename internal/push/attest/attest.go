// Package attest says what is in the images toa-push builds and who built them from what, in
// documents other tools read: an SBOM per platform image (SPDX 2.3 JSON, or CycloneDX 1.6), an
// in-toto statement with a SLSA v1 provenance predicate per image, and cosign-format signatures
// over the images and these documents. They are attached as OCI referrers (a manifest whose
// subject is the image), through the referrers tag schema where the registry has no referrers
// API, and written into an OCI layout alongside the images.
//
// The documents are pure functions of what was built: the same inputs give the same bytes
// (times are Options.Created: the command's SOURCE_DATE_EPOCH, read once by layer.SourceDateEpoch). What npm installed is read from the layers themselves
// (InstalledIn), so that an image whose dependencies were built by an earlier run, and are read
// back from the registry, is described as well as one built now.
//
// It is a room of its own between image (which builds and writes images, and calls Attach
// before it writes an image's tag, so that a failed attach leaves no tag) and the command.
package attest

import (
	"runtime/debug"
)

// Format is the SBOM's format.
type Format string

const (
	SPDX      Format = "spdx"
	CycloneDX Format = "cyclonedx"
	None      Format = "none"
)

// Media and artifact types of what is attached.
const (
	MediaTypeSPDX      = "application/spdx+json"
	MediaTypeCycloneDX = "application/vnd.cyclonedx+json"
	MediaTypeInToto    = "application/vnd.in-toto+json"
	// MediaTypeEmpty is the config of an artifact manifest (OCI image spec 1.1, "Guidelines for
	// artifact usage"): the two bytes `{}`.
	MediaTypeEmpty = "application/vnd.oci.empty.v1+json"

	// AnnotationPredicateType says what an in-toto statement's predicate is, as BuildKit and
	// the in-toto attestation spec's OCI layout name it.
	AnnotationPredicateType = "in-toto.io/predicate-type"
	// AnnotationCreated is OCI's creation time annotation.
	AnnotationCreated = "org.opencontainers.image.created"

	PredicateSLSAProvenance = "https://slsa.dev/provenance/v1"
	StatementType           = "https://in-toto.io/Statement/v1"
)

// MediaType is the media type of an SBOM of the format.
func (f Format) MediaType() string {
	if f == CycloneDX {
		return MediaTypeCycloneDX
	}
	return MediaTypeSPDX
}

// File is the name the SBOM's file gets (`oras pull`).
func (f Format) File() string {
	if f == CycloneDX {
		return "sbom.cdx.json"
	}
	return "sbom.spdx.json"
}

// ProvenanceFile is the name the provenance's file gets.
const ProvenanceFile = "provenance.intoto.json"

// Builder is the program that builds, as provenance and SBOMs name it.
type Builder struct {
	Name    string // "toa-push"
	Version string // the module's version, or "(devel)" with the VCS revision when it has one
}

// ToaPush is toa-push as the running binary says its version.
func ToaPush() Builder {
	b := Builder{Name: "toa-push", Version: "(devel)"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; v != "" {
		b.Version = v
	}
	if b.Version == "(devel)" {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				b.Version = "(devel) " + s.Value
			}
		}
	}
	return b
}

// BuilderID is the URI provenance names the builder by: the command's Go package.
const BuilderID = "https://github.com/toa-deploy/toa-deploy/cmd/toa-push"
