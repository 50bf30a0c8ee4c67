package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
)

// The air-gap tests (issue 8) run toa-push in a network namespace whose only peers are a local
// registry holding Toa's runtime image as a mirror, the target registry and a local npm registry
// (verdaccio), all listening inside it, and nothing else: no route out, and a resolv.conf whose
// nameserver does not answer. testdata/airgap/install.sh installs what they need (make test runs
// it), testdata/airgap/netns.sh makes and removes the namespace; they need root.
//
//  1. toa-push builds and pushes testdata/apps/airgap, whose base is Toa's default
//     ghcr.io/toa-io/runtime:<version>, read from the mirror with --mirror.
//  2. With the target registry stopped, --oci-layout writes the layout inside the namespace;
//     outside, --from-oci-layout pushes it to a new, empty target registry: the digests and the
//     kustomization are those of 1.
//  3. With the npm registry stopped and the layer cache removed, npm installs from its cache.
//  4. With the mirror stopped, or its host not answering, or no mirror at all, toa-push fails in
//     seconds with a message that names the host and what it was needed for.
func TestAirGap(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs root, a network namespace, registries and npm")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace (make test runs as root in CI)")
	}
	verdaccio := verdaccioBin(t)
	registryBin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("no docker-registry: run `bash testdata/registry/install.sh`, or make test")
	}
	storage := fillNpmRegistry(t, verdaccio)

	ns := newNetns(t)
	target := ns.startRegistry(t, registryBin, 5000)
	mirror := ns.startRegistry(t, registryBin, 5001)
	npmRegistry := ns.startVerdaccio(t, verdaccio, storage, 4873)

	const runtime = "1.0.0-alpha.289"
	mirrored := mirror.addr + "/toa-io/runtime:" + runtime
	pushBase(t, mirrored)
	app := copyApp(t, "airgap", ns.inside+":5000")
	npmrc := filepath.Join(t.TempDir(), "npmrc")
	// the runner's npm configuration names the npm registry: npm is to go nowhere else
	if err := os.WriteFile(npmrc, []byte("registry="+npmRegistry.addr+"/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	env := []string{"TOA_CACHE=" + cache, "NPM_CONFIG_USERCONFIG=" + npmrc}
	flag := "--mirror=ghcr.io=" + mirror.addr
	times := map[string]time.Duration{}
	defer func() {
		t.Logf("times: 1 push %s; 2 layout %s, from the layout %s; 3 npm from its cache %s; 4 mirror stopped %s, not answering %s, no mirror %s",
			times["1"], times["2"], times["2 from"], times["3"], times["4"], times["4 no answer"], times["4 no mirror"])
	}()

	// 1
	start := time.Now()
	first := ns.push(t, app, env, flag, "-k", filepath.Join(app, "deployment"))
	times["1"] = time.Since(start)
	readPushed(t, first)
	if len(first.Images) != 2 || !first.Images[0].DepsBuilt || !first.Images[1].DepsBuilt {
		t.Fatalf("1: %+v", first.Images)
	}
	log, _ := os.ReadFile(npmRegistry.log)
	for _, pkg := range []string{"is-number", "debug", "ms"} {
		if !bytes.Contains(log, []byte("/"+pkg)) {
			t.Errorf("1: the npm registry was not asked for %s:\n%s", pkg, log)
		}
	}
	if _, m := index(t, first.Images[0].Reference); m.Annotations[image.AnnotationBaseName] != "ghcr.io/toa-io/runtime:"+runtime || m.Annotations[image.AnnotationBaseMirror] != mirrored {
		t.Errorf("1: the index does not name the mirror: %v", m.Annotations)
	}

	// 2
	target.stop(t)
	layout := filepath.Join(t.TempDir(), "layout")
	start = time.Now()
	inLayout := ns.push(t, app, append(env, "TOA_MIRRORS=ghcr.io="+mirror.addr), "--oci-layout", layout)
	times["2"] = time.Since(start)
	readPushed(t, inLayout, "--oci-layout", layout)
	sameDigests(t, "2 the layout", first, inLayout)
	ns.restartRegistry(t, target)
	kustomization := filepath.Join(t.TempDir(), "deployment")
	start = time.Now()
	fromLayout := pushFromLayout(t, layout, kustomization)
	times["2 from"] = time.Since(start)
	readPushed(t, fromLayout)
	sameDigests(t, "2 pushed from the layout", first, fromLayout)
	for _, p := range fromLayout.Images {
		ref, _ := name.ParseReference(p.Reference, name.Insecure)
		desc, err := remote.Head(ref)
		if err != nil || desc.Digest.String() != p.Digest {
			t.Errorf("2: %s in the new registry: %v %v", p.Reference, desc, err)
		}
	}
	sameFiles(t, filepath.Join(app, "deployment"), kustomization)

	// 3
	npmRegistry.stop(t)
	if err := os.RemoveAll(filepath.Join(cache, "layers")); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	offlineLayout := filepath.Join(t.TempDir(), "layout")
	offline := ns.push(t, app, env, flag, "--oci-layout", offlineLayout)
	times["3"] = time.Since(start)
	readPushed(t, offline, "--oci-layout", offlineLayout)
	if records, _ := filepath.Glob(filepath.Join(cache, "layers", "deps", "*.json")); len(records) != 4 {
		t.Errorf("3: npm made %d layers, want 4 (two components, two platforms)", len(records))
	}
	sameDigests(t, "3 npm from its cache", first, offline)

	// 4
	mirror.stop(t)
	fails := func(key, flag string, want ...string) {
		t.Helper()
		start := time.Now()
		code, _, stderr := ns.run(t, app, env, "-o", "json", "--insecure", flag, "-k", filepath.Join(t.TempDir(), "k"))
		times[key] = time.Since(start)
		if code != 1 || times[key] > 10*time.Second {
			t.Errorf("4 %s: exit %d after %s:\n%s", key, code, times[key], stderr)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("4 %s: the error does not say %q:\n%s", key, w, stderr)
			}
		}
		t.Logf("%s, %s: %s", key, times[key].Round(time.Millisecond), strings.TrimSpace(stderr))
	}
	need := "(needed to resolve the base of composition-front, composition-back)"
	fails("4", flag, "error: the base ghcr.io/toa-io/runtime:"+runtime+" from the mirror "+mirrored, "cannot connect to "+mirror.addr, need)
	fails("4 no answer", "--mirror=ghcr.io="+ns.silent+":5001", "from the mirror "+ns.silent+":5001/toa-io/runtime:"+runtime, "cannot connect to "+ns.silent+":5001", need)
	fails("4 no mirror", "--verbose", "error: the base ghcr.io/toa-io/runtime:"+runtime+": cannot find the host ghcr.io", need)
}

// netns is a network namespace with a veth pair: host is this side's address, inside the
// namespace's, silent an address of the same network that nobody answers.
type netns struct {
	name, host, inside, silent string
}

func newNetns(t *testing.T) *netns {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "airgap", "netns.sh"))
	exec.Command("bash", script, "sweep").Run()
	ns := &netns{name: fmt.Sprintf("toa-airgap-%d", os.Getpid())}
	// a /29 of the documentation networks (never routed on the internet) that no route of this
	// machine but its default one covers or divides
	for _, prefix := range []string{"198.51.100", "203.0.113", "192.0.2"} {
		for k := 0; k < 32 && ns.host == ""; k++ {
			network := fmt.Sprintf("%s.%d/29", prefix, 8*k)
			covering, _ := exec.Command("ip", "-o", "route", "show", "to", "match", network).Output()
			inside, _ := exec.Command("ip", "-o", "route", "show", "root", network).Output()
			used := strings.TrimSpace(string(inside)) != ""
			for _, line := range strings.Split(string(covering), "\n") {
				used = used || (line != "" && !strings.HasPrefix(line, "default"))
			}
			if !used {
				ns.host, ns.inside, ns.silent = fmt.Sprintf("%s.%d", prefix, 8*k+1), fmt.Sprintf("%s.%d", prefix, 8*k+2), fmt.Sprintf("%s.%d", prefix, 8*k+3)
			}
		}
	}
	if ns.host == "" {
		t.Fatal("no free /29 in the documentation networks")
	}
	if out, err := exec.Command("bash", script, "up", ns.name, ns.host, ns.inside).CombinedOutput(); err != nil {
		exec.Command("bash", script, "down", ns.name).Run()
		t.Fatalf("netns.sh up: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("bash", script, "down", ns.name).CombinedOutput(); err != nil {
			t.Errorf("netns.sh down: %v\n%s", err, out)
		}
	})
	return ns
}

// server is a process started inside the namespace.
type server struct {
	addr    string // host:port, or the URL for the npm registry
	log     string
	cmd     *exec.Cmd
	exited  chan struct{}
	restart func(t *testing.T) *server
}

func (s *server) String() string { return s.addr }

// start runs argv inside the namespace until stop or the end of the test; ready says when it
// answers.
func (ns *netns) start(t *testing.T, addr, logFile string, ready func() bool, argv ...string) *server {
	t.Helper()
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.name}, argv...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{addr: addr, log: logFile, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(60 * time.Second)
	for !ready() {
		select {
		case <-s.exited:
			data, _ := os.ReadFile(logFile)
			t.Fatalf("%s exited before it answered:\n%s", argv[0], data)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer in 60 s", argv[0])
		}
	}
	return s
}

func (s *server) stop(t *testing.T) {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// startRegistry starts a Distribution registry on the namespace's address with empty storage.
func (ns *netns) startRegistry(t *testing.T, bin string, port int) *server {
	t.Helper()
	dir := t.TempDir()
	addr := fmt.Sprintf("%s:%d", ns.inside, port)
	secret := make([]byte, 16)
	rand.Read(secret)
	config := filepath.Join(dir, "config.yml")
	yml := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\n"+
		"  delete:\n    enabled: true\nhttp:\n  addr: %s\n  secret: %s\n", filepath.Join(dir, "storage"), addr, hex.EncodeToString(secret))
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	s := ns.start(t, addr, filepath.Join(dir, "registry.log"), answers("http://"+addr+"/v2/"), bin, "serve", config)
	s.restart = func(t *testing.T) *server { return ns.startRegistry(t, bin, port) }
	return s
}

// restartRegistry replaces a stopped registry by a new one, empty, on the same address.
func (ns *netns) restartRegistry(t *testing.T, s *server) {
	t.Helper()
	*s = *s.restart(t)
}

// startVerdaccio serves a copy of the filled storage on the namespace's address, with no uplink:
// what it has is all there is.
func (ns *netns) startVerdaccio(t *testing.T, bin, storage string, port int) *server {
	t.Helper()
	dir := t.TempDir()
	copyTree(t, storage, filepath.Join(dir, "storage"))
	config := filepath.Join(dir, "config.yaml")
	yml := fmt.Sprintf("storage: %s\npackages:\n  '**':\n    access: $all\nweb:\n  enable: false\nlog: { type: stdout, format: pretty, level: http }\n",
		filepath.Join(dir, "storage"))
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:%d", ns.inside, port)
	return ns.start(t, url, filepath.Join(dir, "verdaccio.log"), answers(url+"/-/ping"),
		"node", bin, "--config", config, "--listen", fmt.Sprintf("%s:%d", ns.inside, port))
}

func answers(url string) func() bool {
	client := &http.Client{Timeout: time.Second}
	return func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

// run runs toa-push inside the namespace.
func (ns *netns) run(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.name, binary}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "TOA_ENV=", "CI=true", "TOA_MIRRORS="), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return outcome(t, cmd)
}

// push runs toa-push -o json --insecure inside the namespace and wants it to succeed; the caller
// reads what it pushed with readPushed, once it has timed the push.
func (ns *netns) push(t *testing.T, dir string, env []string, args ...string) pushOutput {
	t.Helper()
	code, stdout, stderr := ns.run(t, dir, env, append([]string{"-o", "json", "--insecure", "--path", dir}, args...)...)
	if code != 0 {
		t.Fatalf("toa-push %s exited %d:\n%s", strings.Join(args, " "), code, stderr)
	}
	var out pushOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("toa-push -o json: %v\n%s", err, stdout)
	}
	return out
}

// pushFromLayout runs toa-push --from-oci-layout outside the namespace; the caller reads what it
// pushed with readPushed.
func pushFromLayout(t *testing.T, layout, kustomization string) pushOutput {
	t.Helper()
	code, stdout, stderr := run(t, t.TempDir(), "-o", "json", "--insecure", "--from-oci-layout", layout, "-k", kustomization)
	if code != 0 {
		t.Fatalf("toa-push --from-oci-layout exited %d:\n%s", code, stderr)
	}
	var out pushOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("toa-push -o json: %v\n%s", err, stdout)
	}
	return out
}

func sameDigests(t *testing.T, what string, want, got pushOutput) {
	t.Helper()
	digests := map[string]string{}
	for _, img := range want.Images {
		digests[img.Name] = img.Digest
	}
	if len(got.Images) != len(want.Images) {
		t.Errorf("%s: %d images, want %d", what, len(got.Images), len(want.Images))
	}
	for _, img := range got.Images {
		if img.Digest != digests[img.Name] {
			t.Errorf("%s: %s is %s, want %s", what, img.Name, img.Digest, digests[img.Name])
		}
	}
}

func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	entries, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	others, _ := os.ReadDir(b)
	if len(entries) != len(others) {
		t.Errorf("%s has %d files, %s %d", a, len(entries), b, len(others))
	}
	for _, e := range entries {
		x, _ := os.ReadFile(filepath.Join(a, e.Name()))
		y, err := os.ReadFile(filepath.Join(b, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs from %s's: %v", filepath.Join(b, e.Name()), a, err)
		}
	}
}

// pushBase pushes the test base (a stand-in for Toa's runtime image) to the mirror.
func pushBase(t *testing.T, ref string) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, harness.BaseIndex(t)); err != nil {
		t.Fatalf("push the base to the mirror: %v", err)
	}
}

func verdaccioBin(t *testing.T) string {
	t.Helper()
	root := os.Getenv("TOA_CACHE")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "toa-deploy")
	}
	bin := filepath.Join(root, "airgap", "verdaccio-6.8.0", "node_modules", "verdaccio", "bin", "verdaccio")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no verdaccio at %s: run `bash testdata/airgap/install.sh`, or make test", bin)
	}
	return bin
}

// fillNpmRegistry fills a verdaccio storage with the packages the air-gap application installs,
// for both its platforms, by installing them through a verdaccio that proxies the runner's npm
// registry, and returns it. The storage is kept under the cache, by what the application's
// lockfiles hold: the next run finds it filled.
func fillNpmRegistry(t *testing.T, bin string) string {
	t.Helper()
	components, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "apps", "airgap", "components", "*"))
	h := sha256.New()
	for _, c := range components {
		for _, f := range []string{"package.json", "package-lock.json"} {
			data, _ := os.ReadFile(filepath.Join(c, f))
			h.Write(data)
		}
	}
	storage := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(bin)))), "storage-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(storage, ".filled")); err == nil {
		return storage
	}
	os.RemoveAll(storage)
	upstream, err := exec.Command("npm", "config", "get", "registry").Output()
	if err != nil {
		t.Fatalf("npm config get registry: %v", err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	yml := fmt.Sprintf("storage: %s\nuplinks:\n  upstream:\n    url: %s\npackages:\n  '**':\n    access: $all\n    proxy: upstream\nweb:\n  enable: false\nlog: { type: stdout, format: pretty, level: warn }\n",
		storage, strings.TrimSpace(string(upstream)))
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command("node", bin, "--config", config, "--listen", addr)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	ready := answers("http://" + addr + "/-/ping")
	for deadline := time.Now().Add(60 * time.Second); !ready(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("verdaccio did not answer in 60 s:\n%s", log.String())
		}
	}
	for _, c := range components {
		for _, cpu := range []string{"x64", "arm64"} {
			work := filepath.Join(dir, filepath.Base(c)+"-"+cpu)
			copyTree(t, c, work)
			install := exec.Command("npm", "ci", "--omit=dev", "--os=linux", "--cpu="+cpu, "--libc=glibc", "--ignore-scripts",
				"--no-audit", "--no-fund", "--no-update-notifier", "--registry=http://"+addr+"/", "--cache="+filepath.Join(dir, "cache"))
			install.Dir = work
			if out, err := install.CombinedOutput(); err != nil {
				t.Fatalf("fill the npm registry with %s for %s: %v\n%s\n%s", filepath.Base(c), cpu, err, out, log.String())
			}
		}
	}
	if err := os.WriteFile(filepath.Join(storage, ".filled"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return storage
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			if info.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
