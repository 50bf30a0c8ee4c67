//go:build tools

// Package tools pins syft, the SBOM reader the tests hand toa-push's attached SBOMs to
// (`syft convert`: what a consumer that reads one document sees) and the pushed images (`syft
// scan`: what a scanner finds in the layers), as Trivy, Dependency-Track and Kyverno read a
// document alone; it shares no code with toa-push's writer.
package tools

import _ "github.com/anchore/syft/cmd/syft"
