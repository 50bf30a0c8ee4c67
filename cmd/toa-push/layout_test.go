package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What --from-oci-layout, --oci-layout and --mirror refuse, before any work: exit 2 with the
// reason.
func TestAirGapFlagsRefused(t *testing.T) {
	app, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "apps", "airgap"))
	notLayout := t.TempDir()
	os.WriteFile(filepath.Join(notLayout, "notes.txt"), []byte("mine"), 0o644)
	layoutAndMore := t.TempDir() // an OCI layout that holds the user's files too
	os.MkdirAll(filepath.Join(layoutAndMore, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(layoutAndMore, "oci-layout"), []byte(`{"imageLayoutVersion": "1.0.0"}`), 0o644)
	os.WriteFile(filepath.Join(layoutAndMore, "index.json"), []byte(`{"schemaVersion": 2, "manifests": []}`), 0o644)
	os.WriteFile(filepath.Join(layoutAndMore, "notes.txt"), []byte("mine"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from-oci-layout", notLayout, "--plan"}, "--from-oci-layout pushes the layout as --oci-layout wrote it, and takes no --plan"},
		{[]string{"--from-oci-layout", notLayout, "--mirror", "ghcr.io=m.internal"}, "takes no --mirror"},
		{[]string{"--from-oci-layout", notLayout, "production"}, "takes no environment argument"},
		{[]string{"--from-oci-layout", notLayout}, "is not an OCI image layout"},
		{[]string{"--from-oci-layout", t.TempDir()}, "is not an OCI image layout"},
		{[]string{"--path", app, "--plan", "--mirror", "ghcr.io"}, "mirror 'ghcr.io' is not FROM=TO"},
		{[]string{"--path", app, "--plan", "--oci-layout", notLayout}, "is neither empty nor an OCI image layout: it has no oci-layout file, and holds notes.txt"},
		{[]string{"--path", app, "--plan", "--oci-layout", layoutAndMore}, "is an OCI image layout that holds files toa-push does not write there: notes.txt"},
		{[]string{"--path", app, "--oci-layout", notLayout, "-k", notLayout}, "--kustomization cannot be the --oci-layout folder itself"},
	} {
		code, stdout, stderr := run(t, t.TempDir(), c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stdout %q:\n%s", strings.Join(c.args, " "), code, stdout, stderr)
		}
	}
	t.Setenv("TOA_MIRRORS", "ghcr.io=")
	if code, _, stderr := run(t, t.TempDir(), "--path", app, "--plan"); code != 2 || !strings.Contains(stderr, "mirror 'ghcr.io=' is not FROM=TO") {
		t.Errorf("a bad TOA_MIRRORS: exit %d:\n%s", code, stderr)
	}
}
