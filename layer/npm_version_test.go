package layer

import (
	"context"
	"testing"
)

// The version read from npm's package.json is the one npm itself prints: it is an input of the
// dependencies hash, so it must be exact.
func TestNpmVersionReadMatchesNpm(t *testing.T) {
	read := installedNpmVersion()
	if read == "" {
		t.Skip("npm on PATH is not laid out as npm's own package (bin/npm-cli.js): the version is asked of npm")
	}
	asked, err := version(context.Background(), "npm")
	if err != nil {
		t.Fatal(err)
	}
	if read != asked {
		t.Errorf("read %q from package.json, npm --version says %q", read, asked)
	}
}
