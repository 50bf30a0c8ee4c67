package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// credentials finds a registry's credentials with a keychain (Docker's config file and its
// credential helpers by default, as go-containerregistry reads them) and names where they came
// from, so that "no credentials found for HOST" and "HOST refused the credentials of SOURCE" are
// two messages.
type credentials struct {
	keychain authn.Keychain
	custom   bool // not Docker's: the source is the keychain given
}

// found is what credentials found for one registry.
type found struct {
	auth   authn.Authenticator
	source string // where they came from; "" when none were found
	looked string // where they were looked for, for the message when none were found
}

func (c credentials) resolve(ctx context.Context, repo name.Repository) (found, error) {
	auth, err := authn.Resolve(ctx, c.keychain, repo)
	if err != nil && !c.custom && helperMissing(err) {
		// Common when a config.json comes from a laptop: it names Docker Desktop's store.
		file, _ := dockerConfigFile()
		return found{}, &fault.Input{File: file, Message: fmt.Sprintf("sends the credentials of %s to %s, which is not installed here (%v)",
			repo.RegistryStr(), credentialSource(file, repo.RegistryStr()), err),
			Hint: "install that credential helper on this machine, or remove the entry from the file and log in with `docker login " + repo.RegistryStr() + "`", Err: err}
	}
	var bad *fault.Input
	if errors.As(err, &bad) { // the credentials file refused (keychain.CheckConfig): it names it
		return found{}, err
	}
	if err != nil {
		return found{}, fmt.Errorf("find the credentials of %s: %w", repo.RegistryStr(), err)
	}
	if c.custom {
		if auth == authn.Anonymous {
			return found{auth: auth, looked: "looked in the keychain given"}, nil
		}
		return found{auth: auth, source: "the keychain given"}, nil
	}
	file, looked := dockerConfigFile()
	if auth == authn.Anonymous {
		return found{auth: auth, looked: looked}, nil
	}
	return found{auth: auth, source: credentialSource(file, repo.RegistryStr())}, nil
}

// helperMissing says whether err is a credential helper's program not found on PATH. Docker's
// credential client keeps only the words of the exec error, not the error.
func helperMissing(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || strings.Contains(err.Error(), "executable file not found")
}

// dockerConfigFile is the file go-containerregistry's default keychain reads: Docker's
// config.json, else $REGISTRY_AUTH_FILE, else Podman's auth.json; and the words for where it
// looked, for the message when no credentials were found there.
func dockerConfigFile() (file, looked string) {
	home, _ := os.UserHomeDir()
	exists := func(f string) bool {
		info, err := os.Stat(f)
		return err == nil && !info.IsDir()
	}
	docker := ""
	if home != "" {
		docker = filepath.Join(home, ".docker", "config.json")
	}
	dir := os.Getenv("DOCKER_CONFIG")
	if (docker != "" && exists(docker)) || (dir != "" && exists(filepath.Join(dir, "config.json"))) {
		if dir != "" { // Docker's config.Load reads $DOCKER_CONFIG when it is set
			return filepath.Join(dir, "config.json"), "looked in " + filepath.Join(dir, "config.json")
		}
		return docker, "looked in " + docker
	}
	var others []string
	if f := os.Getenv("REGISTRY_AUTH_FILE"); f != "" {
		others = append(others, filepath.Clean(f))
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		others = append(others, filepath.Join(d, "containers", "auth.json"))
	}
	config := os.Getenv("XDG_CONFIG_HOME")
	if config == "" && home != "" {
		config = filepath.Join(home, ".config")
	}
	if config != "" {
		others = append(others, filepath.Join(config, "containers", "auth.json"))
	}
	for _, f := range others {
		if exists(f) {
			return f, "looked in " + f
		}
	}
	if docker == "" {
		return "", "there is no Docker config file"
	}
	return "", "there is no Docker config file at " + docker
}

// credentialSource names where Docker's config sends a registry's credentials: a credential
// helper of credHelpers, the credsStore, or the file's auths.
func credentialSource(file, host string) string {
	if os.Getenv("DOCKER_AUTH_CONFIG") != "" && strings.Contains(os.Getenv("DOCKER_AUTH_CONFIG"), host) {
		return "DOCKER_AUTH_CONFIG"
	}
	if file == "" {
		return "Docker's keychain"
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return file
	}
	var cfg struct {
		CredHelpers map[string]string `json:"credHelpers"`
		CredsStore  string            `json:"credsStore"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		return file
	}
	key := host
	if host == name.DefaultRegistry {
		key = authn.DefaultAuthKey
	}
	if h := cfg.CredHelpers[key]; h != "" {
		return fmt.Sprintf("the credential helper docker-credential-%s (credHelpers in %s)", h, file)
	}
	if cfg.CredsStore != "" {
		return fmt.Sprintf("the credential store docker-credential-%s (credsStore in %s)", cfg.CredsStore, file)
	}
	return file
}

// refusedCredentials is a registry (host) that asked for credentials and refused the ones it got
// (from source), or got none (source ""; looked says where they were looked for: "looked in
// FILE", "there is no Docker config file at FILE"). err is the registry's answer.
func refusedCredentials(host string, status int, source, looked string, err error) *Error {
	e := withRequest(&Error{Kind: Credentials, Host: host, Err: err}, err)
	e.Status = status
	if source == "" {
		e.Message = fmt.Sprintf("%s asks for credentials (%d) and none were found for it (%s): log in with `docker login %s`, or configure a credential helper for it",
			host, status, looked, host)
		return e
	}
	verb := "refused the credentials of"
	if status == 403 {
		verb = "does not allow this with the credentials of"
	}
	e.Message = fmt.Sprintf("%s %s %s (%d): log in again with `docker login %s`, or check that the account may push to it", host, verb, source, status, host)
	return e
}
