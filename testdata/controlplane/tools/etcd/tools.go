//go:build tools

// Package tools pins the etcd server the tests' control plane runs.
package tools

import _ "go.etcd.io/etcd/server/v3"
