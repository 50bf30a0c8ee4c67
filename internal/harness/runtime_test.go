package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The stand-in runtime in a pod (TOA_TELEMETRY_READY given, as the telemetry extension gives it
// to every workload): `toa compose` keeps running, answers the readiness probe on its port and
// path once its start delay is over, and on SIGTERM closes the probe at once and exits 0 after
// its stop delay. Outside a pod it composes and exits, as the image tests expect.
func TestStandinRuntimeServes(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node on PATH")
	}
	toa := filepath.Join(RuntimePackage(t), "bin", "toa")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"echo/manifest.toa.yaml": "name: echo\nnamespace: greeters\n",
		"echo/package.json":      `{"name":"echo"}`,
	})
	port := freePort(t)

	outside := exec.Command("node", toa, "compose", "echo")
	outside.Dir = dir
	outside.Env = withoutPodEnv(os.Environ())
	if out, err := outside.CombinedOutput(); err != nil || !strings.HasSuffix(string(out), "composed 1 components\n") {
		t.Fatalf("outside a pod: %v\n%s", err, out)
	}

	cmd := exec.Command("node", toa, "compose", "echo")
	cmd.Dir = dir
	cmd.Env = append(withoutPodEnv(os.Environ()),
		fmt.Sprintf(`TOA_TELEMETRY_READY={"enabled":true,"path":"/.ready","port":%d}`, port),
		"TOA_STANDIN_START_DELAY=0.5", "TOA_STANDIN_STOP_DELAY=1.5", "TOA_STANDIN_PROBE_HOST=127.0.0.1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	began := time.Now()
	for !answers(url + "/.ready") {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("no answer on %s/.ready after 10 s", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
	opened := time.Since(began)
	t.Logf("the probe answered %s after the start", opened.Round(time.Millisecond))
	if opened < 400*time.Millisecond {
		t.Errorf("the probe answered %s after the start, before TOA_STANDIN_START_DELAY=0.5", opened)
	}
	if res, err := http.Get(url + "/elsewhere"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /elsewhere: %v %v, want 404", res, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	time.Sleep(200 * time.Millisecond)
	if answers(url + "/.ready") {
		t.Error("the probe still answers after SIGTERM: the runtime takes work while it stops")
	}
	select {
	case err := <-exited:
		took := time.Since(termed)
		t.Logf("exited %v %s after SIGTERM", err, took.Round(time.Millisecond))
		if err != nil || took < 1400*time.Millisecond || took > 5*time.Second {
			t.Errorf("after SIGTERM: exit %v in %s, want 0 after TOA_STANDIN_STOP_DELAY=1.5", err, took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after SIGTERM")
	}
	var all []string
	for l := range lines {
		all = append(all, l)
	}
	if got := strings.Join(all, "\n"); !strings.Contains(got, "composed 1 components") ||
		!strings.Contains(got, fmt.Sprintf("ready on port %d at /.ready", port)) || !strings.Contains(got, "stopped") {
		t.Errorf("it printed:\n%s", got)
	}
}

func withoutPodEnv(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "KUBERNETES_SERVICE_HOST=") && !strings.HasPrefix(e, "TOA_TELEMETRY_READY=") &&
			!strings.HasPrefix(e, "TOA_STANDIN_") && !strings.HasPrefix(e, "TOA_EXPOSITION_PROPERTIES=") {
			out = append(out, e)
		}
	}
	return out
}

func answers(url string) bool {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get(url)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode == http.StatusOK
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The exposition gateway's service (TOA_EXPOSITION_PROPERTIES, its telemetry probe `false`), as
// `toa serve` runs it in a pod: it answers its own probe (8004 in the manifests; moved to a free
// port here), and stops answering on SIGTERM.
func TestStandinExpositionProbe(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node on PATH")
	}
	toa := filepath.Join(RuntimePackage(t), "bin", "toa")
	port := freePort(t)
	cmd := exec.Command("node", toa, "serve", ".")
	cmd.Dir = t.TempDir()
	cmd.Env = append(withoutPodEnv(os.Environ()), "TOA_TELEMETRY_READY=false",
		`TOA_EXPOSITION_PROPERTIES={"authorities":{"portal":"api.portal.example.com"}}`,
		fmt.Sprintf("TOA_STANDIN_EXPOSITION_PORT=%d", port), "TOA_STANDIN_PROBE_HOST=127.0.0.1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d/.ready", port)
	began := time.Now()
	for !answers(url) {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("no answer on %s after 10 s", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if answers(url) {
		t.Error("the probe still answers after SIGTERM")
	}
}
