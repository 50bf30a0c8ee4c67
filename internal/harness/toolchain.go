package harness

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// DebianNoCompilerRef is where PushDebianBaseWithoutCompiler pushes, under the registry's address.
const DebianNoCompilerRef = "bases/debian-node:18-nocc"

// CompilerPackages are the Debian packages whose files the bases lose in
// PushDebianBaseWithoutCompiler and ServeCompilerPackages serves: what a build.run line installs
// for node-gyp (as `apt-get install g++ make` or Alpine's `apk add g++ make` would).
var CompilerPackages = []string{"cpp-12", "gcc-12", "g++-12", "make"}

// triplet is GNU's name of a Debian architecture, as in /usr/lib/gcc/TRIPLET.
func triplet(arch string) string {
	if arch == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// PushDebianBaseWithoutCompiler pushes, as <addr>/bases/debian-node:18-nocc, the Debian bases of
// PushDebianBase with a layer on top that removes their compiler (whiteouts of make, the gcc,
// g++ and cpp drivers, cc1 and cc1plus): a base with node and npm but no way to build a native
// addon, as Toa's default Alpine base is, until a build.run line installs one.
func PushDebianBaseWithoutCompiler(t testing.TB, addr string) string {
	t.Helper()
	return pushDebian(t, addr+"/"+DebianNoCompilerRef, func(arch string) []v1.Layer {
		tr := triplet(arch)
		gone := []string{"usr/bin/make", "usr/bin/" + tr + "-gcc-12", "usr/bin/" + tr + "-g++-12", "usr/bin/" + tr + "-cpp-12",
			"usr/lib/gcc/" + tr + "/12/cc1", "usr/lib/gcc/" + tr + "/12/cc1plus"}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, p := range gone {
			wh := filepath.Join(filepath.Dir(p), ".wh."+filepath.Base(p))
			if err := tw.WriteHeader(&tar.Header{Name: wh, Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			t.Fatal(err)
		}
		return []v1.Layer{l}
	})
}

// ServeCompilerPackages serves on loopback, as http://127.0.0.1:PORT/MACHINE/PACKAGE.tar
// (MACHINE as `uname -m` says it: x86_64, aarch64), the files of each of CompilerPackages for
// that architecture, from the .debs testdata/bases/build.sh downloaded (dpkg-deb --fsys-tarfile):
// the packages a build.run line fetches and unpacks, as a package manager would. It returns the
// server's address; the server stops with the test.
func ServeCompilerPackages(t testing.TB) string {
	t.Helper()
	files := map[string][]byte{}
	for arch, machine := range map[string]string{"amd64": "x86_64", "arm64": "aarch64"} {
		archives := filepath.Join(debianbase.Dir(), "apt-"+arch, "cache", "archives")
		for _, pkg := range CompilerPackages {
			debs, _ := filepath.Glob(filepath.Join(archives, pkg+"_*_"+arch+".deb"))
			if len(debs) != 1 {
				t.Fatalf("the .deb of %s for %s in %s: found %d; remove %s and run bash testdata/bases/build.sh %s (make setup does)",
					pkg, arch, archives, len(debs), debianbase.File(arch), arch)
			}
			out, err := exec.CommandContext(t.Context(), "dpkg-deb", "--fsys-tarfile", debs[0]).Output()
			if err != nil {
				t.Fatalf("dpkg-deb --fsys-tarfile %s: %v", debs[0], err)
			}
			files["/"+machine+"/"+pkg+".tar"] = out
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		_, _ = w.Write(data)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}
