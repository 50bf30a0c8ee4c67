//go:build tools

// Package tools pins oras, the OCI client the tests ask which referrers an image has
// (`oras discover`): a reader of what toa-push attaches that shares no code with
// go-containerregistry.
package tools

import _ "oras.land/oras/cmd/oras"
