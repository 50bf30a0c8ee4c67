package image

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// registryStandIn answers /v2/ as a registry does and every other request with 404 "manifest
// unknown", so that a test sees how toa-push connects to it. check, when set, may answer first.
func registryStandIn(check func(w http.ResponseWriter, r *http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if check != nil && check(w, r) {
			return
		}
		w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
		if r.URL.Path == "/v2/" {
			w.Write([]byte("{}"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`))
	})
}

func resolveErr(t *testing.T, ref string, opts ...registry.RegistryOption) error {
	t.Helper()
	reg, err := registry.NewRegistries(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return ResolveBase(ctx, reg, ref).Err
}

// A TLS registry on 127.0.0.1 with a certificate the system does not trust: the error is the
// certificate's, with --ca-file and --insecure as the way out (go-containerregistry's plain
// HTTP fallback for loopback used to hide it behind the TLS server's "400 Bad Request").
func TestTLSRegistryOnLoopback(t *testing.T) {
	server := httptest.NewUnstartedServer(registryStandIn(nil))
	server.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes it refuses are the point
	server.StartTLS()
	defer server.Close()
	host := strings.TrimPrefix(server.URL, "https://")
	ref := host + "/bases/node:20"

	err := resolveErr(t, ref)
	if err == nil {
		t.Fatal("resolved through an untrusted certificate")
	}
	msg := (registry.Wrap("the base "+ref, "", err)).Error()
	for _, want := range []string{"the TLS certificate of " + host + " does not verify", "--ca-file", "--insecure"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "400") {
		t.Errorf("the plain HTTP attempt's answer reached the user:\n%s", msg)
	}

	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := resolveErr(t, ref, registry.WithCAFile(ca)); err == nil || !strings.Contains(registry.Reason(err), "not found") {
		t.Errorf("with --ca-file the registry should be reached (and the base not found): %v", err)
	}
	if err := resolveErr(t, ref, registry.WithInsecure(true)); err == nil || !strings.Contains(registry.Reason(err), "not found") {
		t.Errorf("with --insecure the registry should be reached (and the base not found): %v", err)
	}
}

// A plain HTTP registry elsewhere than on loopback is not spoken to in plain HTTP without
// --insecure (go-containerregistry would for private addresses), and the message says to pass it.
func TestPlainHTTPRegistryElsewhere(t *testing.T) {
	ip := nonLoopbackIP()
	if ip == "" {
		t.Skip("this machine has no address but loopback to listen on")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	server := &httptest.Server{Listener: l, Config: &http.Server{Handler: registryStandIn(nil)}}
	server.Start()
	defer server.Close()
	host := l.Addr().String()
	ref := host + "/bases/node:20"

	err = resolveErr(t, ref)
	msg := fmt.Sprint(err)
	if err == nil || !strings.Contains(msg, host+" does not speak HTTPS") || !strings.Contains(msg, "--insecure") {
		t.Errorf("want the hint to pass --insecure, got: %s", msg)
	}
	if err := resolveErr(t, ref, registry.WithInsecure(true)); err == nil || !strings.Contains(registry.Reason(err), "not found") {
		t.Errorf("with --insecure the registry should be reached (and the base not found): %v", err)
	}
}

func nonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// "No credentials found for HOST" and "HOST refused the credentials of SOURCE" are two messages,
// and the second names where the credentials came from: Docker's config file or the credential
// helper it names. Basic and bearer (token) authentication alike.
func TestCredentialMessages(t *testing.T) {
	const user, good = "ci", "s3cret"
	goodBasic := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+good))
	for _, scheme := range []string{"basic", "bearer"} {
		t.Run(scheme, func(t *testing.T) {
			var server *httptest.Server
			server = httptest.NewServer(registryStandIn(func(w http.ResponseWriter, r *http.Request) bool {
				switch {
				case r.URL.Path == "/token":
					if r.Header.Get("Authorization") != goodBasic {
						w.WriteHeader(http.StatusUnauthorized)
						return true
					}
					w.Write([]byte(`{"token":"granted"}`))
					return true
				case scheme == "basic" && r.Header.Get("Authorization") == goodBasic,
					scheme == "bearer" && r.Header.Get("Authorization") == "Bearer granted":
					return false
				case scheme == "basic":
					w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				default:
					w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="test"`, server.URL))
				}
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
				return true
			}))
			defer server.Close()
			host := strings.TrimPrefix(server.URL, "http://")
			ref := host + "/bases/node:20"

			config := dockerConfig(t)

			if msg := registry.Reason(resolveErr(t, ref)); !strings.Contains(msg, host+" asks for credentials (401) and none were found for it") ||
				!strings.Contains(msg, "docker login "+host) {
				t.Errorf("without credentials: %s", msg)
			}

			writeConfig(t, config, fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, base64.StdEncoding.EncodeToString([]byte(user+":wrong"))))
			if msg := registry.Reason(resolveErr(t, ref)); !strings.Contains(msg, host+" refused the credentials of "+config+" (401)") {
				t.Errorf("with wrong credentials in the config file: %s", msg)
			}

			bin := t.TempDir()
			helper := filepath.Join(bin, "docker-credential-toatest")
			script := fmt.Sprintf("#!/bin/sh\nread server\necho '{\"ServerURL\":\"'$server'\",\"Username\":\"%s\",\"Secret\":\"wrong\"}'\n", user)
			if err := os.WriteFile(helper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			writeConfig(t, config, fmt.Sprintf(`{"credHelpers":{%q:"toatest"}}`, host))
			want := host + " refused the credentials of the credential helper docker-credential-toatest (credHelpers in " + config + ") (401)"
			if msg := registry.Reason(resolveErr(t, ref)); !strings.Contains(msg, want) {
				t.Errorf("with wrong credentials from a helper:\n got %s\nwant %s", msg, want)
			}

			writeConfig(t, config, fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, base64.StdEncoding.EncodeToString([]byte(user+":"+good))))
			if err := resolveErr(t, ref); err == nil || !strings.Contains(registry.Reason(err), "not found") {
				t.Errorf("with good credentials the registry should be reached (and the base not found): %v", err)
			}
		})
	}
}

// dockerConfig points every place the default keychain reads at a fresh home of the test's, and
// returns the path of Docker's config.json there (not written yet). DOCKER_CONFIG is set too:
// Docker's config package reads $HOME once per process.
func dockerConfig(t *testing.T) string {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("DOCKER_CONFIG", filepath.Join(home, ".docker"))
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	return filepath.Join(home, ".docker", "config.json")
}

func writeConfig(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The same against a real registry: Distribution speaking HTTPS on 127.0.0.1 with a certificate
// no system trusts. Without --ca-file the push fails with the certificate's error and the way
// out; with it, the push completes.
func TestPushToTLSRegistryOnLoopback(t *testing.T) {
	addr, ca := harness.TLSRegistry(t)
	baseAddr, _ := harness.RegistryWithLog(t)
	baseRef := harness.PushLayeredBase(t, baseAddr)
	dir := harness.TwoCompositions(t, addr, baseRef)

	reg, _ := registry.NewRegistries()
	_, err := pushWith(context.Background(), t, dir, baseRef, reg)
	if err == nil {
		t.Fatal("pushed through an untrusted certificate")
	}
	for _, want := range []string{"the TLS certificate of " + addr + " does not verify", "pass --ca-file FILE", "--insecure"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "400 Bad Request") {
		t.Errorf("the plain HTTP attempt's answer reached the user:\n%v", err)
	}

	reg, _ = registry.NewRegistries(registry.WithCAFile(ca))
	res, err := pushWith(context.Background(), t, dir, baseRef, reg)
	if err != nil {
		t.Fatalf("with --ca-file: %v", err)
	}
	if !res.Images[0].Built || !res.Images[1].Built {
		t.Errorf("not built: %+v", res.Images)
	}
}

// The credential messages against a real registry that asks for them: Distribution with
// htpasswd, over TLS. Without credentials, with the wrong ones in Docker's config file or from a
// credential helper, the push fails before any blob moves and says which; with the right ones
// from a helper it completes, and a later push with them in the config file finds it all there.
func TestPushToRegistryWithCredentials(t *testing.T) {
	addr, ca := harness.AuthRegistry(t)
	baseAddr, _ := harness.RegistryWithLog(t)
	baseRef := harness.PushLayeredBase(t, baseAddr)
	dir := harness.TwoCompositions(t, addr, baseRef)

	config := dockerConfig(t)
	push := func() (*Result, error) {
		reg, err := registry.NewRegistries(registry.WithCAFile(ca))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return pushWith(ctx, t, dir, baseRef, reg)
	}
	refused := func(step string, want ...string) {
		t.Helper()
		_, err := push()
		if err == nil {
			t.Fatalf("%s: pushed", step)
		}
		t.Logf("%s: %v", step, err)
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the error lacks %q:\n%v", step, w, err)
			}
		}
	}
	auth := func(password string) string {
		return base64.StdEncoding.EncodeToString([]byte(harness.AuthUser + ":" + password))
	}

	refused("no credentials", addr+" asks for credentials (401) and none were found for it", "docker login "+addr)

	writeConfig(t, config, fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, addr, auth("wrong")))
	refused("wrong credentials in the config file", addr+" refused the credentials of "+config+" (401)", "docker login "+addr)

	bin := t.TempDir()
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	helper := func(password string) {
		script := fmt.Sprintf("#!/bin/sh\nread server\necho '{\"ServerURL\":\"'$server'\",\"Username\":\"%s\",\"Secret\":\"%s\"}'\n", harness.AuthUser, password)
		if err := os.WriteFile(filepath.Join(bin, "docker-credential-toatest"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(t, config, fmt.Sprintf(`{"credHelpers":{%q:"toatest"}}`, addr))
	helper("wrong")
	refused("wrong credentials from a helper", addr+" refused the credentials of the credential helper docker-credential-toatest (credHelpers in "+config+") (401)")

	helper(harness.AuthPassword)
	res, err := push()
	if err != nil {
		t.Fatalf("with the helper's good credentials: %v", err)
	}
	for _, img := range res.Images {
		if !img.Built || img.Digest == "" {
			t.Errorf("%s: not built: %+v", img.Name, img)
		}
	}

	writeConfig(t, config, fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, addr, auth(harness.AuthPassword)))
	again, err := push()
	if err != nil {
		t.Fatalf("with good credentials in the config file: %v", err)
	}
	for i, img := range again.Images {
		if img.Built || img.Digest != res.Images[i].Digest {
			t.Errorf("%s: the second push built it again or changed it: %+v", img.Name, img)
		}
	}
}

// A config.json that sends a registry's credentials to a helper this machine lacks (one copied
// from a laptop, naming Docker Desktop's store) is bad input naming the file, the helper and the
// way out, not the credential client's exec error alone.
func TestCredentialHelperNotInstalled(t *testing.T) {
	addr := harness.MemoryRegistry(t)
	config := dockerConfig(t)
	for _, tc := range []struct{ config, helper string }{
		{`{"credsStore":"toa-missing"}`, "the credential store docker-credential-toa-missing (credsStore in " + config + ")"},
		{fmt.Sprintf(`{"credHelpers":{%q:"toa-missing"}}`, addr), "the credential helper docker-credential-toa-missing (credHelpers in " + config + ")"},
	} {
		writeConfig(t, config, tc.config)
		err := resolveErr(t, addr+"/bases/node:20")
		if fault.ClassOf(err) != fault.ClassInput {
			t.Errorf("%s: class %v, want bad input: %v", tc.config, fault.ClassOf(err), err)
		}
		for _, want := range []string{config, "sends the credentials of " + addr + " to " + tc.helper + ", which is not installed here", "docker login " + addr} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the error lacks %q:\n%v", tc.config, want, err)
			}
		}
	}
}
