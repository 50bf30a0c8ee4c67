//go:build tools

// Package tools pins kwok, which simulates the tests' nodes and pods, and
// the module whose kustomize/stage files up.sh joins into kwok's stages.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
