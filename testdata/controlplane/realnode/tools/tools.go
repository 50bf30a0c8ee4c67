//go:build tools

// Package tools pins the real node's kubelet: the k8s.io/kubernetes module of
// ../../tools/kubernetes (same version, same replaces), with the modules the
// kubelet needs beyond the control plane's binaries.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
