package keychain

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// The file checked is the one go-containerregistry's keychain reads, in its order, and a
// regular file within the bound passes.
func TestConfigFile(t *testing.T) {
	home, docker, runtime := t.TempDir(), t.TempDir(), t.TempDir()
	authFile := filepath.Join(t.TempDir(), "auth.json")
	write := func(file string) {
		os.MkdirAll(filepath.Dir(file), 0o755)
		if err := os.WriteFile(file, []byte(`{"auths":{}}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	t.Setenv("DOCKER_CONFIG", "")
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	if f := ConfigFile(); f != "" {
		t.Errorf("none written: %q", f)
	}
	write(filepath.Join(runtime, "containers", "auth.json"))
	if f := ConfigFile(); f != filepath.Join(runtime, "containers", "auth.json") {
		t.Errorf("podman's runtime auth.json: %q", f)
	}
	write(authFile)
	t.Setenv("REGISTRY_AUTH_FILE", authFile)
	if f := ConfigFile(); f != authFile {
		t.Errorf("$REGISTRY_AUTH_FILE: %q", f)
	}
	write(filepath.Join(home, ".docker", "config.json"))
	if f := ConfigFile(); f != filepath.Join(home, ".docker", "config.json") {
		t.Errorf("~/.docker/config.json: %q", f)
	}
	t.Setenv("DOCKER_CONFIG", docker) // Docker's config.Load reads $DOCKER_CONFIG's, even when missing
	if f := ConfigFile(); f != filepath.Join(docker, "config.json") {
		t.Errorf("$DOCKER_CONFIG: %q", f)
	}
	write(filepath.Join(docker, "config.json"))
	if err := CheckConfig(); err != nil {
		t.Errorf("a regular config: %v", err)
	}
	if _, err := Default.Resolve(name.MustParseReference("127.0.0.1:5000/app:1").Context()); err != nil {
		t.Errorf("resolve with a regular config: %v", err)
	}
	os.Remove(filepath.Join(docker, "config.json"))
	if err := syscall.Mkfifo(filepath.Join(docker, "config.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Default.Resolve(name.MustParseReference("127.0.0.1:5000/app:1").Context())
	if !fault.IsInput(err) || !strings.Contains(err.Error(), "is a named pipe") {
		t.Errorf("resolve with a named pipe: %v, want the input error that names it", err)
	}
}
