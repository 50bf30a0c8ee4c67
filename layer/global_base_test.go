package layer

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// TestGlobalScriptsRunInBase: a global install of a package whose postinstall writes a marker,
// for the arm64 Debian base (under QEMU): the postinstall ran in the base, at the package's place
// in the image, with the base's node, and no warning says a script was skipped.
func TestGlobalScriptsRunInBase(t *testing.T) {
	npmTest(t)
	base := debianbase.Image(t, "arm64")
	src, err := filepath.Abs(filepath.Join("testdata", "packages", "marker"))
	if err != nil {
		t.Fatal(err)
	}
	packed := t.TempDir()
	cmd := exec.Command("npm", "pack", "--pack-destination", packed, src)
	cmd.Dir = packed
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	tarball := filepath.Join(packed, "toa-test-marker-1.0.0.tgz")
	var warnings collect
	start := time.Now()
	l, err := Global(t.Context(), []string{"npm i -g " + tarball}, Platform{OS: "linux", Architecture: "arm64", Libc: "glibc"},
		WithCacheDir(t.TempDir()), npmCache, WithBase(base), WithBaseNode("18.20.4"), WithWarnings(warnings.warn))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("installed and run in the base in %s; warnings: %s", time.Since(start), warnings.String())
	files := layerFiles(t, l)
	marker := string(files["usr/local/lib/node_modules/toa-test-marker/marker.txt"])
	if !strings.HasPrefix(marker, "linux/arm64 v18.") {
		t.Errorf("marker.txt = %q, want linux/arm64 v18...", marker)
	}
	if strings.Contains(warnings.String(), "are not run") {
		t.Errorf("a warning says scripts were not run: %s", warnings.String())
	}
	for name := range files {
		if !strings.HasPrefix(name, "usr/local/lib/node_modules/") && !strings.HasPrefix(name, "usr/local/bin/") &&
			name != "usr/" && name != "usr/local/" && name != "usr/local/lib/" {
			t.Errorf("the layer holds %s", name)
		}
	}
}
