//go:build tools

// Package tools pins cosign, which the tests run as `cosign verify --key` against the
// signatures toa-push writes in cosign's format with Go's crypto.
package tools

import _ "github.com/sigstore/cosign/v3/cmd/cosign"
