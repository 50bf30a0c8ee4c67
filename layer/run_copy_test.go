package layer

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/layer/sandbox"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// copyLines change the base in every way a layer records: a file added, a file removed, a
// folder replaced (opaque), a folder removed, a mode changed, links, a setuid file in new
// folders, a file replaced by a link.
var copyLines = []string{
	"echo test > /etc/toa-run-test",
	"rm /etc/debian_version",
	"rm -rf /etc/skel && mkdir /etc/skel && echo replaced > /etc/skel/README",
	"rm -rf /etc/update-motd.d",
	"chmod 600 /etc/host.conf",
	"ln -s toa-run-test /etc/toa-link && mkdir -p /opt/toa/new && : > /opt/toa/new/empty && chmod 4755 /opt/toa/new/empty",
	"rm /etc/issue && ln -s issue.net /etc/issue",
}

// TestRunWithoutOverlay runs build.run lines over an overlay and, as on a kernel that refuses
// overlayfs in a user namespace (sandbox.NoOverlayEnv), on a private copy of the base: the two
// layers are the same bytes, the way that ran is said, and umoci applies the layer's whiteouts and
// opaque folder over a base that has the files.
func TestRunWithoutOverlay(t *testing.T) {
	base := debianbase.Image(t, "amd64")
	p := Platform{OS: "linux", Architecture: "amd64", Libc: "glibc"}
	cache := t.TempDir()
	run := func(noOverlay bool) (v1.Layer, string) {
		if noOverlay {
			t.Setenv(sandbox.NoOverlayEnv, "1")
		}
		// the unpacked base is kept, the layer made anew
		for _, d := range []string{"layers", "records", "file-layers"} {
			os.RemoveAll(filepath.Join(cache, d))
		}
		var warnings collect
		start := time.Now()
		l, err := Run(t.Context(), copyLines, nil, p, WithCacheDir(cache), WithBase(base), WithWarnings(warnings.warn))
		if err != nil {
			t.Fatalf("no overlay %v: %v", noOverlay, err)
		}
		d, _ := l.Digest()
		t.Logf("no overlay %v: %s in %s", noOverlay, d, time.Since(start))
		return l, warnings.String()
	}
	overlay, said := run(false)
	if strings.Contains(said, "private copy") {
		t.Errorf("the overlay run says it ran on a copy: %s", said)
	}
	copied, said := run(true)
	if !strings.Contains(said, "runs on a private copy of the base for linux/amd64 instead of an overlay") || !strings.Contains(said, sandbox.NoOverlayEnv) {
		t.Errorf("the run on a copy does not say so: %q", said)
	}
	if d1, d2 := digest(t, overlay), digest(t, copied); d1 != d2 {
		t.Errorf("the run on a copy made %s, the overlay %s:\noverlay:\n%s\ncopy:\n%s", d2, d1, listing(t, overlay), listing(t, copied))
	}
	want := []string{"etc/.wh.debian_version", "etc/.wh.update-motd.d", "etc/skel/.wh..wh..opq", "etc/skel/README", "etc/toa-run-test",
		"etc/host.conf", "opt/toa/new/empty"}
	list := listing(t, copied)
	for _, name := range want {
		if !strings.Contains(list, name+" ") {
			t.Errorf("the layer lacks %s:\n%s", name, list)
		}
	}
	if strings.Contains(list, "usr/") || strings.Contains(list, "proc/") {
		t.Errorf("the layer holds what no line changed:\n%s", list)
	}
	umociReads(t, copied)
}

// listing is a layer's entries, a line each: name, type, mode, link.
func listing(t *testing.T, l v1.Layer) string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b strings.Builder
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(h.Name + " " + string(h.Typeflag) + " " + os.FileMode(h.Mode).String() + " " + h.Linkname + "\n")
	}
}

// umociReads unpacks, with umoci, an image of a small base holding the files copyLines change
// and the layer over it.
func umociReads(t *testing.T, l v1.Layer) {
	umoci, err := exec.LookPath("umoci")
	if err != nil {
		t.Skip("no umoci: run bash testdata/readers/install.sh (make test does)")
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, body string }{{"etc/debian_version", "12\n"}, {"etc/skel/.bashrc", "# bash\n"},
		{"etc/update-motd.d/10-uname", "uname\n"}, {"etc/host.conf", "multi on\n"}, {"etc/issue", "Debian\n"}, {"etc/issue.net", "Debian\n"}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	lower, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	oci := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(oci, lower, l)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "image"})); err != nil {
		t.Fatal(err)
	}
	args := []string{"unpack", "--image", filepath.Join(dir, "layout") + ":image", filepath.Join(dir, "bundle")}
	if os.Getuid() != 0 {
		args = append(args[:1], append([]string{"--rootless"}, args[1:]...)...)
	}
	if out, err := exec.Command(umoci, args...).CombinedOutput(); err != nil {
		t.Fatalf("umoci unpack: %v\n%s", err, out)
	}
	rootfs := filepath.Join(dir, "bundle", "rootfs")
	for name, want := range map[string]string{"etc/toa-run-test": "test\n", "etc/skel/README": "replaced\n", "etc/toa-link": "test\n", "etc/issue": "Debian\n"} {
		if data, err := os.ReadFile(filepath.Join(rootfs, name)); err != nil || string(data) != want {
			t.Errorf("umoci's %s: %q, %v; want %q", name, data, err, want)
		}
	}
	for _, gone := range []string{"etc/debian_version", "etc/skel/.bashrc", "etc/update-motd.d"} {
		if _, err := os.Lstat(filepath.Join(rootfs, gone)); err == nil {
			t.Errorf("umoci's root holds %s, which a line removed", gone)
		}
	}
	if info, err := os.Lstat(filepath.Join(rootfs, "etc", "issue")); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Errorf("umoci's etc/issue is not the link a line made: %v, %v", info, err)
	}
}
