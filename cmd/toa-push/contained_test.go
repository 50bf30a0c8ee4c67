package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// TestContainedScripts pushes testdata/apps/contained, whose dependency's postinstall looks for
// the runner in every way a published package could (files in $HOME, the sign key by a parent's
// command line, parents' environments, /proc/N/root, /proc/N/fd, /proc/sys) and leaves a process
// behind, and whose build.run lines test Toa 289's order. For the target that is the runner
// (linux/amd64, glibc, the runner's Node), for arm64 under QEMU and for another Node major, run as
// root and as an unprivileged user: the script ran (in the base, on top of what the lines made,
// with the build's environment), and neither the image nor the runner holds any of what it looked
// for; the process it left is gone and named; the user's checkout is unchanged.
func TestContainedScripts(t *testing.T) {
	// each case its own registry: the same application on the same base would find its images
	// pushed by the case before
	debian := func(t *testing.T, addr string) string { return harness.PushDebianBase(t, addr) }
	runnerBase := func(t *testing.T, addr string) string { return harness.PushRunnerBase(t, addr) }
	for _, c := range []struct {
		name      string
		base      func(*testing.T, string) string
		platforms string
		user      bool
		signKey   string // "file" or "env"
		// container: toa-push as a CI job in a container under the default seccomp profile, where
		// no namespace can be made
		container bool
	}{
		{"the runner's own target as root", runnerBase, "[linux/amd64]", false, "file", false},
		{"another Node major and arm64 under QEMU as root", debian, "[linux/amd64, linux/arm64]", false, "env", false},
		{"the runner's own target as a user", runnerBase, "[linux/amd64]", true, "file", false},
		{"arm64 under QEMU as a user", debian, "[linux/arm64]", true, "env", false},
		{"the runner's own target and arm64 as root in a container", debian, "[linux/amd64, linux/arm64]", false, "file", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := harness.Registry(t)
			base := c.base(t, addr)
			dir := copyApp(t, "contained", addr)
			ctxFile := filepath.Join(dir, "context.toa.yaml")
			replaceIn(t, ctxFile, addr+"/"+harness.DebianBaseRef, base)
			replaceIn(t, ctxFile, "platforms: [linux/amd64, linux/arm64]", "platforms: "+c.platforms)
			spied := newSpied(t, addr)
			before := tree(t, dir)
			args := []string{"-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment")}
			env := spied.env
			if c.signKey == "file" {
				args = append(args, "--sign-key", spied.keyFile)
			} else {
				args = append(args, "--sign-key", "env://TOA_TEST_SIGN_KEY")
				env = append(env, "TOA_TEST_SIGN_KEY="+spied.keyPEM)
			}
			hostname, _ := os.Hostname()
			corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
			start := time.Now()
			code, stdout, stderr := spied.push(t, c.user, c.container, dir, env, args...)
			t.Logf("pushed in %s", time.Since(start))
			if code != 0 {
				t.Fatalf("toa-push exited %d:\n%s", code, stderr)
			}
			var out pushOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Images) == 0 {
				t.Fatalf("toa-push -o json: %v\n%s", err, stdout)
			}
			if now, _ := os.Hostname(); now != hostname {
				t.Errorf("the host's name is %q, was %q", now, hostname)
			}
			if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(now) != string(corePattern) {
				t.Errorf("core_pattern is %q, was %q", now, corePattern)
			}
			if pids := processes("sleep\x00731"); len(pids) > 0 {
				t.Errorf("the postinstall's process is still running: %v", pids)
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if !strings.Contains(stderr, "sleep 731") || !strings.Contains(stderr, "toa-test-spy") {
				t.Errorf("no warning names the process the postinstall left and the package:\n%s", stderr)
			}
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("the push changed the checkout:\nbefore %q\nafter  %q", before, after)
			}
			ref := out.Images[0].Reference
			for _, platform := range out.Images[0].Platforms {
				spied.checkImage(t, ref, platform)
			}
		})
	}
}

// spied is what the postinstall looks for: secrets in a home folder, the environment and a key
// file, and a marker on the runner.
type spied struct {
	home, keyFile, keyPEM, marker string
	env                           []string
	secrets                       []string
}

func newSpied(t *testing.T, addr string) *spied {
	t.Helper()
	s := &spied{home: t.TempDir()}
	write := func(rel, data string) {
		p := filepath.Join(s.home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// credentials of another registry than the test's, so that the push does not use them
	write(".docker/config.json", `{"auths":{"registry.example.test":{"auth":"Y2k6dG9hLXNlY3JldC1kb2NrZXI="}},"toa":"toa-secret-docker"}`)
	write(".kube/config", "apiVersion: v1\nkind: Config\nusers: [{name: ci, user: {token: toa-secret-kube}}]\n")
	write(".config/toa-test-secret", "toa-secret-home-file")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	s.keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	s.keyFile = filepath.Join(t.TempDir(), "cosign.key")
	if err := os.WriteFile(s.keyFile, []byte(s.keyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	s.marker = fmt.Sprintf("/tmp/toa-host-marker-%d", os.Getpid())
	if err := os.WriteFile(s.marker, []byte("on the runner"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(s.marker) })
	body := strings.Split(s.keyPEM, "\n")[1] // a line of the key's base64
	s.secrets = []string{"toa-secret-docker", "toa-secret-kube", "toa-secret-home-file", "toa-secret-cosign",
		"toa-secret-registry", body, "toa-host-marker", "owned-by-a-postinstall", "written by a postinstall"}
	s.env = []string{"HOME=" + s.home, "TOA_ENV=", "CI=true", "PATH=" + os.Getenv("PATH"),
		"KUBECONFIG=" + filepath.Join(s.home, ".kube", "config"), "COSIGN_PASSWORD=toa-secret-cosign",
		"TOA_TEST_ARGUMENT=from-the-runner", "NPM_TOKEN=toa-secret-registry"}
	return s
}

// push runs toa-push with env, as root or as an unprivileged user who owns the checkout, the
// home folder and the cache.
func (s *spied) push(t *testing.T, asUser, inContainer bool, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cache := t.TempDir()
	program := binary
	cmd := exec.Command(program, args...)
	if asUser {
		const uid, gid = 4242, 4242
		program = userBinary(t)
		for _, p := range []string{dir, s.home, cache, filepath.Dir(s.keyFile)} {
			chownTree(t, p, uid, gid)
			openPath(t, p)
		}
		cmd = exec.Command(program, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	}
	cmd.Dir = dir
	cmd.Env = append(env, "TOA_CACHE="+cache)
	if inContainer {
		cmd = harness.UnderContainerSeccomp(cmd)
	}
	return outcome(t, cmd)
}

// checkImage reads the pushed image of one platform: what the postinstall and the lines saw,
// and that nothing it looked for is in it.
func (s *spied) checkImage(t *testing.T, ref, platform string) {
	t.Helper()
	rootfs, process := harness.Unpacked(t, ref, platform)
	spy := filepath.Join(rootfs, "composition", "contained-app", "node_modules", "toa-test-spy")
	var seen struct {
		Platform, NODE_ENV, TOA_TEST_ARGUMENT, INIT_CWD, Tool string
		PackageJSON                                           bool
		Env                                                   []string
	}
	data, err := os.ReadFile(filepath.Join(spy, "seen.json"))
	if err != nil {
		t.Fatalf("%s: the postinstall did not run: %v", platform, err)
	}
	if err := json.Unmarshal(data, &seen); err != nil {
		t.Fatal(err)
	}
	arch := map[string]string{"linux/amd64": "linux/x64", "linux/arm64": "linux/arm64"}[platform]
	if !strings.HasPrefix(seen.Platform, arch) || seen.NODE_ENV != "production" || seen.TOA_TEST_ARGUMENT != "from-the-runner" ||
		seen.INIT_CWD != "/composition/contained-app" || !seen.PackageJSON || seen.Tool != "tool-ran" {
		t.Errorf("%s: what the postinstall saw: %s", platform, data)
	}
	for _, v := range seen.Env {
		if strings.HasPrefix(v, "TOA_SIGN") || strings.HasPrefix(v, "COSIGN") || v == "KUBECONFIG" || v == "NPM_TOKEN" || v == "DOCKER_CONFIG" {
			t.Errorf("%s: the postinstall's environment has %s", platform, v)
		}
	}
	for file, want := range map[string]string{
		"etc/toa-run-env":       "production from-the-runner /composition\n",
		"etc/toa-before-global": "absent\n",
		"etc/toa-after-global":  "present\n",
	} {
		if got, err := os.ReadFile(filepath.Join(rootfs, file)); err != nil || string(got) != want {
			t.Errorf("%s: /%s = %q, %v; want %q", platform, file, got, err, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(rootfs, "etc", "toa-run-package")); !strings.Contains(string(got), `"contained-app"`) {
		t.Errorf("%s: a build.run line did not find the component's package.json in /composition: %q", platform, got)
	}
	for _, kv := range process.Env {
		if strings.HasPrefix(kv, "TOA_TEST_ARGUMENT=") {
			t.Errorf("%s: the image's config holds the build argument: %s", platform, kv)
		}
	}
	for _, top := range []string{"composition", "etc", "root", "tmp", "usr/local/lib/node_modules"} {
		filepath.WalkDir(filepath.Join(rootfs, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if info, err := d.Info(); err != nil || info.Size() > 16<<20 {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, secret := range s.secrets {
				if strings.Contains(string(data), secret) {
					rel, _ := filepath.Rel(rootfs, p)
					t.Errorf("%s: the image's /%s holds %q", platform, rel, secret)
				}
			}
			return nil
		})
	}
}

// tree lists the files of dir but the kustomization a push writes, with their contents' hashes.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var list []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "deployment" {
			return filepath.SkipDir
		}
		entry := rel
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			sum := sha256.Sum256(data)
			entry += " " + hex.EncodeToString(sum[:8])
		}
		list = append(list, entry)
		return nil
	})
	return list
}

// processes are the pids whose command line begins with prefix (its arguments joined by NUL).
func processes(prefix string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(string(cmdline), prefix) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func chownTree(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openPath lets others through the folders above p (t.TempDir makes them 0700).
func openPath(t *testing.T, p string) {
	t.Helper()
	for dir := filepath.Dir(p); dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, info.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// As a user where no namespace can be made (a CI job as a non-root user in a container under
// the default seccomp profile, or Ubuntu 24.04's restriction of user namespaces), a push with an
// install script fails before anything is installed or pushed, naming the ways out; with
// --scripts-on-runner it runs them on the runner, and says so.
func TestNoSandboxAsAUser(t *testing.T) {
	addr := harness.Registry(t)
	runnerBase := harness.PushRunnerBase(t, addr)
	for _, c := range []struct {
		name string
		wrap func(*exec.Cmd) *exec.Cmd
	}{
		{"a container's default seccomp profile", harness.UnderContainerSeccomp},
		{"user namespaces without capabilities", harness.UnderMountlessUserNamespaces},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyApp(t, "contained", addr)
			ctxFile := filepath.Join(dir, "context.toa.yaml")
			replaceIn(t, ctxFile, addr+"/"+harness.DebianBaseRef, runnerBase)
			replaceIn(t, ctxFile, "platforms: [linux/amd64, linux/arm64]", "platforms: [linux/amd64]")
			// no build.run lines: the scripts alone need the sandbox
			data, _ := os.ReadFile(ctxFile)
			text := string(data)
			text = text[:strings.Index(text, "    run: |")] + text[strings.Index(text, "resources:"):]
			os.WriteFile(ctxFile, []byte(text), 0o644)
			spied := newSpied(t, addr)
			start := time.Now()
			code, _, stderr := spied.pushWith(t, c.wrap, dir, spied.env, "--path", dir, "-k", filepath.Join(dir, "deployment"))
			took := time.Since(start)
			for _, want := range []string{"run the job as root in its container", "allow user namespaces", "--scripts-on-runner"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("the refusal does not say %q", want)
				}
			}
			if code != 1 || took > 60*time.Second {
				t.Errorf("exit %d in %s, want 1 at once:\n%s", code, took, stderr)
			}
			if strings.Contains(stderr, "installing dependencies") {
				t.Errorf("npm ran before the refusal:\n%s", stderr)
			}
			// the postinstall runs on the runner then, and leaves its process there
			t.Cleanup(func() {
				for _, pid := range processes("sleep\x00731") {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			code, stdout, stderr := spied.pushWith(t, c.wrap, dir, spied.env, "-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment"), "--scripts-on-runner")
			if code != 0 || !strings.Contains(stderr, "--scripts-on-runner: the install scripts") {
				t.Fatalf("--scripts-on-runner: exit %d:\n%s", code, stderr)
			}
			// what the sandbox keeps from a script: on the runner, the same one finds the secrets
			var out pushOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Images) == 0 {
				t.Fatalf("toa-push -o json: %v\n%s", err, stdout)
			}
			rootfs, _ := harness.Unpacked(t, out.Images[0].Reference, "linux/amd64")
			found, _ := os.ReadFile(filepath.Join(rootfs, "composition", "contained-app", "node_modules", "toa-test-spy", "found.json"))
			for _, secret := range []string{"toa-secret-home-file", "toa-secret-registry"} {
				if !strings.Contains(string(found), secret) {
					t.Errorf("on the runner, the postinstall did not find %q: the spy misses what the sandbox hides", secret)
				}
			}
		})
	}
}

// pushWith runs toa-push as the unprivileged user 4242 through wrap.
func (s *spied) pushWith(t *testing.T, wrap func(*exec.Cmd) *exec.Cmd, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cache := t.TempDir()
	const uid, gid = 4242, 4242
	program := userBinary(t)
	for _, p := range []string{dir, s.home, cache} {
		chownTree(t, p, uid, gid)
		openPath(t, p)
	}
	cmd := exec.Command(program, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Dir = dir
	cmd.Env = append(env, "TOA_CACHE="+cache)
	return outcome(t, wrap(cmd))
}

// userBinary is toa-push where another user can run it.
func userBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	program := filepath.Join(bin, "toa-push")
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(program, data, 0o755); err != nil {
		t.Fatal(err)
	}
	openPath(t, program)
	return program
}
