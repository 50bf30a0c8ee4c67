// Package keychain is Docker's keychain as toa-push and toa-apply read it: go-containerregistry's
// default keychain, which reads Docker's config.json (or Podman's auth.json) whole, with no bound,
// and blocks on a named pipe; so the file it is about to read is checked first: a regular file
// of at most MaxConfigSize.
package keychain

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// MaxConfigSize is the largest credentials file read: a Docker config holds credentials and
// settings, a few KiB; a thousand registries' credentials take well under 1 MiB.
const MaxConfigSize = 1 << 20

// Default is go-containerregistry's default keychain behind CheckConfig.
var Default authn.Keychain = checked{authn.DefaultKeychain}

type checked struct{ next authn.Keychain }

func (k checked) Resolve(target authn.Resource) (authn.Authenticator, error) {
	return k.ResolveContext(context.Background(), target)
}

func (k checked) ResolveContext(ctx context.Context, target authn.Resource) (authn.Authenticator, error) {
	if err := CheckConfig(); err != nil {
		return nil, err
	}
	return authn.Resolve(ctx, k.next, target)
}

// ConfigFile is the file go-containerregistry's default keychain reads, in its order:
// $DOCKER_CONFIG/config.json or ~/.docker/config.json when either exists (Docker's config.Load
// reads $DOCKER_CONFIG's when it is set), else $REGISTRY_AUTH_FILE, else
// $XDG_RUNTIME_DIR/containers/auth.json; "" when there is none.
func ConfigFile() string {
	exists := func(f string) bool { // as go-containerregistry's fileExists
		info, err := os.Stat(f)
		return err == nil && !info.IsDir()
	}
	dir := os.Getenv("DOCKER_CONFIG")
	home, err := os.UserHomeDir()
	docker := ""
	if err == nil {
		docker = filepath.Join(home, ".docker", "config.json")
	}
	if (docker != "" && exists(docker)) || (dir != "" && exists(filepath.Join(dir, "config.json"))) {
		if dir != "" {
			return filepath.Join(dir, "config.json")
		}
		return docker
	}
	if f := filepath.Clean(os.Getenv("REGISTRY_AUTH_FILE")); exists(f) {
		return f
	}
	if f := filepath.Clean(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "containers", "auth.json")); exists(f) {
		return f
	}
	return ""
}

// CheckConfig refuses the keychain's file (ConfigFile) when it is not a regular file (a named
// pipe would hang the read, a link to /dev/zero fill the memory) or is larger than MaxConfigSize:
// a *fault.Input that names it and says what to do.
func CheckConfig() error {
	file := ConfigFile()
	if file == "" {
		return nil
	}
	info, err := os.Stat(file)
	if err != nil {
		return nil // gone since: the keychain finds none
	}
	hint := "make it Docker's config file (`docker login` writes one), or set DOCKER_CONFIG to a folder that holds one"
	switch {
	case !info.Mode().IsRegular():
		return &fault.Input{File: file, Message: fmt.Sprintf("is %s, not a regular file: the registry credentials are read from it", fsys.Kind(info)), Hint: hint}
	case info.Size() > MaxConfigSize:
		return &fault.Input{File: file, Message: fmt.Sprintf("is %.1f MiB, more than the %d MiB a credentials file is read to", float64(info.Size())/(1<<20), MaxConfigSize>>20), Hint: hint}
	}
	return nil
}
