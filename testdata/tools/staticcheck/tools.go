//go:build tools

// Package tools pins staticcheck (honnef.co/go/tools), the linter `make vet` runs beside go vet:
// it finds dead code, deprecated APIs and mistakes go vet does not look for.
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
