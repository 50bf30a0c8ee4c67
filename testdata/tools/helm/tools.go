//go:build tools

// Package tools pins Helm v3, the tool Toa 289 deployed with (`helm upgrade --install --wait`):
// `make bench` applies a chart of the same objects with it, beside toa-apply and kubectl
// (bench/large.go). Built by testdata/tools/helm.sh; no test needs it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
