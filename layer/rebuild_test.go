package layer

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// layerFiles reads a layer's regular files.
func layerFiles(t *testing.T, l v1.Layer) map[string][]byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeLink {
			data = files[h.Linkname]
		}
		files[h.Name] = data
	}
}

// TestScriptsRunInBase installs a component with a binding.gyp package and a postinstall for
// platforms the runner's npm cannot run them for: the addon is an ELF of the base's CPU, the
// marker says the base's platform and Node, and the scripts saw none of the runner's secrets.
func TestScriptsRunInBase(t *testing.T) {
	for _, c := range []struct {
		arch    string
		machine elf.Machine
		node    string
	}{
		{"arm64", elf.EM_AARCH64, "linux/arm64 v18."},
		{"amd64", elf.EM_X86_64, "linux/x64 v18."},
	} {
		t.Run(c.arch, func(t *testing.T) {
			base := debianbase.Image(t, c.arch)
			t.Setenv("TOA_SIGN_KEY", "secret-key")
			t.Setenv("COSIGN_PASSWORD", "secret-password")
			t.Setenv("KUBECONFIG", "/secret/kubeconfig")
			var warnings collect
			start := time.Now()
			l, err := Dependencies(t.Context(), fixture(t, "scripts"), Platform{OS: "linux", Architecture: c.arch, Libc: "glibc"},
				WithCacheDir(t.TempDir()), WithBase(base), WithBaseNode("18.20.4"), WithWarnings(warnings.warn))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("installed and rebuilt in %s; warnings: %s", time.Since(start), warnings.String())
			files := layerFiles(t, l)
			addon := files["composition/default-scripts/node_modules/toa-test-native/build/Release/addon.node"]
			f, err := elf.NewFile(bytes.NewReader(addon))
			if err != nil {
				t.Fatalf("addon.node: %v (files: %d)", err, len(files))
			}
			if f.Machine != c.machine {
				t.Errorf("addon.node is for %s, want %s", f.Machine, c.machine)
			}
			marker := string(files["composition/default-scripts/node_modules/toa-test-marker/marker.txt"])
			if !strings.HasPrefix(marker, c.node) {
				t.Errorf("marker.txt = %q, want %q...", marker, c.node)
			}
			env := string(files["composition/default-scripts/node_modules/toa-test-marker/env.txt"])
			for _, secret := range []string{"TOA_SIGN_KEY", "COSIGN_PASSWORD", "KUBECONFIG", "DOCKER_CONFIG"} {
				if strings.Contains(env, secret) {
					t.Errorf("the postinstall saw %s", secret)
				}
			}
		})
	}
}

// TestRunScriptsAsNpmRebuild: the scripts run through the base npm's @npmcli/run-script
// (runscript.js) leave the same files in the layer as `npm rebuild` of the same packages in the
// same base, and give the scripts the same environment variables (the marker writes their
// names), but for the flags toa-push passes npm rebuild itself and the order of node-gyp's
// config.gypi.
func TestRunScriptsAsNpmRebuild(t *testing.T) {
	base := debianbase.Image(t, "amd64")
	layers := map[bool]map[string][]byte{}
	for _, byNpm := range []bool{false, true} {
		start := time.Now()
		l, err := Dependencies(t.Context(), fixture(t, "scripts"), Platform{OS: "linux", Architecture: "amd64", Libc: "glibc"},
			WithCacheDir(t.TempDir()), WithBase(base), WithBaseNode("18.20.4"), func(o *options) { o.npmRebuild = byNpm })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("npm rebuild %v: %s", byNpm, time.Since(start))
		layers[byNpm] = layerFiles(t, l)
	}
	// what `npm rebuild --no-audit --no-fund --no-update-notifier --foreground-scripts` adds
	// for its own flags: npm exports a flag that is not its default to the scripts
	// (npm_config_x in env.txt, "x": in config.gypi)
	flags := regexp.MustCompile(`(?m)^\s*(npm_config_(audit|fund|update_notifier|foreground_scripts)|"(audit|fund|update_notifier|foreground_scripts)":.*)\n`)
	ours, npms := layers[false], layers[true]
	for name, data := range npms {
		got, ok := ours[name]
		if !ok {
			t.Errorf("%s: in npm rebuild's layer only", name)
			continue
		}
		if strings.HasSuffix(name, "/env.txt") || strings.HasSuffix(name, "/config.gypi") {
			data, got = flags.ReplaceAll(data, nil), flags.ReplaceAll(got, nil)
		}
		if strings.HasSuffix(name, "/config.gypi") { // node-gyp writes the variables in the environ's order
			data, got = sortedLines(data), sortedLines(got)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s differs:\n--- npm rebuild\n%s\n--- runscript.js\n%s", name, data, got)
		}
	}
	for name := range ours {
		if _, ok := npms[name]; !ok {
			t.Errorf("%s: in runscript.js's layer only", name)
		}
	}
}

func sortedLines(data []byte) []byte {
	lines := strings.Split(string(data), "\n")
	sort.Strings(lines)
	return []byte(strings.Join(lines, "\n"))
}
