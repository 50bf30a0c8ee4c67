package attest

import (
	"bytes"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ValidateCycloneDX checks a BOM against CycloneDX 1.6's schema, for the tests against the
// registry (package attest_test).
func ValidateCycloneDX(t *testing.T, doc []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return cycloneDXSchema(t).Validate(v)
}
