package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/containerseccomp"
)

func TestMain(m *testing.M) {
	Init()
	containerseccomp.Exec()
	code := m.Run()
	if shared.dir != "" {
		removeAll(shared.dir)
	}
	os.Exit(code)
}

func TestRunNodeInForeignBase(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			root := debianRoot(t, arch, SandboxIDs())
			upper := filepath.Join(t.TempDir(), "upper")
			os.Mkdir(upper, 0o755)
			var out bytes.Buffer
			start := time.Now()
			err := Run(context.Background(), Command{Root: root, Upper: upper, Platform: "linux/" + arch,
				Args: []string{"/bin/sh", "-c", "node -p process.arch && echo made > /etc/marker && rm /etc/debian_version && ls /proc/self/ns >/dev/null; id -u"},
				Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Stdout: &out, Stderr: &out})
			t.Logf("ran in %s: %s", time.Since(start), out.String())
			if err != nil {
				t.Fatal(err)
			}
			nodeArch := map[string]string{"arm64": "arm64", "amd64": "x64"}[arch]
			if got := strings.Fields(out.String()); len(got) < 2 || got[0] != nodeArch || got[len(got)-1] != "0" {
				t.Errorf("output %q, want %s and uid 0", out.String(), arch)
			}
			if _, err := os.Stat(filepath.Join(root, "etc", "marker")); err == nil {
				t.Error("the run wrote into the cached root")
			}
			if data, err := os.ReadFile(filepath.Join(upper, "etc", "marker")); err != nil || string(data) != "made\n" {
				t.Errorf("upper's marker: %q, %v", data, err)
			}
		})
	}
}
