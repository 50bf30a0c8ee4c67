package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var debianEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"}

// amd64Run is a Command in the amd64 Debian base with a fresh upper folder, as root.
func amd64Run(t *testing.T, script string) Command {
	t.Helper()
	root := debianRoot(t, "amd64", SandboxIDs())
	upper := filepath.Join(userDir(t, 0), "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	return Command{Root: root, Upper: upper, Platform: "linux/amd64", Args: []string{"/bin/sh", "-c", script}, Env: debianEnv,
		Timeout: 2 * time.Minute}
}

// ways runs f for the namespace way and the chroot way (NoNamespacesEnv).
func ways(t *testing.T, f func(t *testing.T)) {
	for _, way := range []string{"namespaces", "chroot"} {
		t.Run(way, func(t *testing.T) {
			if way == "chroot" {
				needRoot(t, "it runs the sandbox chrooted")
				t.Setenv(NoNamespacesEnv, "1")
			}
			f(t)
		})
	}
}

// running are the processes of the runner whose command line holds word.
func running(word string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if line := strings.ReplaceAll(string(data), "\x00", " "); strings.Contains(line, word) {
			out = append(out, e.Name()+": "+line)
		}
	}
	return out
}

// TestLeftovers: a command that leaves processes behind (one in a session of its own) ends when
// it ends, not at the timeout; what it left is named and killed, on the runner too.
func TestLeftovers(t *testing.T) {
	ways(t, func(t *testing.T) {
		// the second a daemon: forked twice, in a session of its own
		c := amd64Run(t, `sleep 1000 & (python3 -c "import os, time; os.setsid(); time.sleep(1001)" &); sleep 1; echo started`)
		c.Timeout = time.Minute
		var left []string
		c.Leftovers = func(l []string) { left = l }
		start := time.Now()
		err := Run(t.Context(), c)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if took > 20*time.Second {
			t.Errorf("the run took %s: it waited for what the command left", took)
		}
		named := func(command string) bool {
			return slices.ContainsFunc(left, func(l string) bool { return strings.HasPrefix(l, "pid ") && strings.HasSuffix(l, ": "+command) })
		}
		if len(left) != 2 || !named("sleep 1000") || !named("python3 -c import os, time; os.setsid(); time.sleep(1001)") {
			t.Errorf("leftovers %q, want the two sleeps", left)
		}
		if still := append(running("sleep 1000"), running("sleep(1001)")...); len(still) > 0 {
			t.Errorf("still running after the run: %q", still)
		}
		t.Logf("ended in %s, named %q", took.Round(time.Millisecond), left)
	})
}

// forkBomb forks 600 sleepers, says where a fork was refused, and waits. Its first line is a
// comment naming the bomb, so that a check for what it left finds only its own forks, not any
// python3 of the runner (the control plane's node runs pods beside the tests).
const forkBomb = `python3 -c '
# toa-deploy sandbox test: fork bomb
import os, time
for n in range(600):
    try:
        if os.fork() == 0:
            time.sleep(100)
            os._exit(0)
    except OSError as e:
        print("refused after", n, "forks:", os.strerror(e.errno), flush=True)
        break
time.sleep(100)
'`

// TestProcessBound: a fork bomb of 600 sleepers has its forks refused at the sandbox's bound
// (RLIMIT_NPROC, counted per user namespace, or per id chrooted), is stopped within seconds and
// named so, none of it left.
func TestProcessBound(t *testing.T) {
	ways(t, func(t *testing.T) {
		c := amd64Run(t, forkBomb)
		c.MaxProcesses = 300
		var out strings.Builder
		c.Stdout, c.Stderr = &out, &out
		start := time.Now()
		err := Run(t.Context(), c)
		took := time.Since(start)
		var bound *BoundError
		if !errors.As(err, &bound) || bound.Bound != BoundProcesses || bound.Limit != 300 {
			t.Fatalf("err = %v, want the bound of processes\n%s", err, out.String())
		}
		if took > 30*time.Second {
			t.Errorf("stopped in %s", took)
		}
		if !strings.Contains(err.Error(), "reached the sandbox's bound of 300") {
			t.Errorf("err = %v", err)
		}
		if !strings.Contains(out.String(), "forks: Resource temporarily unavailable") {
			t.Errorf("no fork was refused: %q", out.String())
		}
		if still := running("toa-deploy sandbox test: fork bomb"); len(still) > 0 {
			t.Errorf("%d forks still run after the run: %q", len(still), still[:min(len(still), 3)])
		}
		t.Logf("stopped in %s: %s", took.Round(time.Millisecond), strings.TrimSpace(out.String()))
	})
}

// TestFileSizeBound: a file written past the sandbox's bound on one file fails there, named.
func TestFileSizeBound(t *testing.T) {
	ways(t, func(t *testing.T) {
		c := amd64Run(t, "head -c 20000000 /dev/zero > /tmp/big")
		c.MaxFileSize = 10 << 20
		err := Run(t.Context(), c)
		var bound *BoundError
		if !errors.As(err, &bound) || bound.Bound != BoundFileSize || bound.Path != "/tmp/big" {
			t.Fatalf("err = %v, want the bound of a file's size, on /tmp/big", err)
		}
		if !strings.Contains(err.Error(), "it wrote /tmp/big up to the sandbox's bound of 10 MiB on one file") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestWriteBound: a command that would write 10 GiB (64 MiB files, each within the file's bound)
// is stopped past the sandbox's bound on what it writes, named; the overshoot is what it writes
// in the watcher's interval.
func TestWriteBound(t *testing.T) {
	ways(t, func(t *testing.T) {
		c := amd64Run(t, "i=0; while [ $i -lt 160 ]; do head -c 67108864 /dev/zero > /tmp/f$i; i=$((i+1)); done")
		c.MaxWrite = 256 << 20
		start := time.Now()
		err := Run(t.Context(), c)
		took := time.Since(start)
		var bound *BoundError
		if !errors.As(err, &bound) || bound.Bound != BoundWrite {
			t.Fatalf("err = %v, want the bound of what it writes", err)
		}
		if !strings.Contains(err.Error(), "it wrote more than the sandbox's bound of 256 MiB") {
			t.Errorf("err = %v", err)
		}
		written := newWriteWatch([]watched{{Source: filepath.Join(c.Upper, "tmp"), Target: "/tmp"}}, 0).sum()
		if filepath.Base(c.Upper) == "upper" && written == 0 { // the chroot way's copy holds it
			written = newWriteWatch([]watched{{Source: filepath.Join(c.Upper, copyDir, "tmp"), Target: "/tmp"}}, 0).sum()
		}
		if written >= 10<<30 {
			t.Errorf("it wrote %d MiB", written>>20)
		}
		t.Logf("stopped in %s, %d MiB written (the bound 256 MiB)", took.Round(time.Millisecond), written>>20)
	})
}

// TestNetworkNone: with NetworkNone the command has loopback alone, and it works; by default it
// has the runner's interfaces (but the pods' veth pairs, which come and go while the real node of
// the other tests runs pods).
func TestNetworkNone(t *testing.T) {
	script := `python3 -c '
import socket
print(" ".join(sorted(n for _, n in socket.if_nameindex() if not n.startswith("veth"))))
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); c.close(); print("loopback works")
'`
	interfaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var runner []string
	for _, i := range interfaces {
		if !strings.HasPrefix(i.Name, "veth") {
			runner = append(runner, i.Name)
		}
	}
	slices.Sort(runner)
	for _, tc := range []struct {
		network Network
		want    string
	}{
		{NetworkNone, "lo\nloopback works"},
		{NetworkRunner, strings.Join(runner, " ") + "\nloopback works"},
	} {
		c := amd64Run(t, script)
		c.Network = tc.network
		var out strings.Builder
		c.Stdout, c.Stderr = &out, &out
		if err := Run(t.Context(), c); err != nil {
			t.Fatalf("%q: %v\n%s", tc.network, err, out.String())
		}
		if got := strings.TrimSpace(out.String()); got != tc.want {
			t.Errorf("network %q: %q, want %q", tc.network, got, tc.want)
		}
	}
	needRoot(t, "it runs the sandbox chrooted")
	t.Setenv(NoNamespacesEnv, "1")
	c := amd64Run(t, "true")
	c.Network = NetworkNone
	var refused *RunnerError
	if err := Run(t.Context(), c); !errors.As(err, &refused) || !strings.Contains(err.Error(), "a network of loopback alone needs a network namespace") {
		t.Errorf("no namespaces and no network: %v", err)
	}
}

// TestProcessBoundPerSandbox: RLIMIT_NPROC counts a sandbox's own tasks (per user namespace, as
// Linux counts it since 5.14), not every task of the sandbox's id: 250 sleepers of another
// sandbox at once, of the same id as root runs them, take nothing of this one's bound.
func TestProcessBoundPerSandbox(t *testing.T) {
	other := amd64Run(t, `python3 -c '
import os, time
for n in range(250):
    if os.fork() == 0:
        time.sleep(100)
        os._exit(0)
print("forked", flush=True)
time.sleep(100)
'`)
	forked := make(chan struct{})
	other.Stdout = writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "forked") {
			close(forked)
		}
		return len(p), nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, other) }()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case <-forked:
	case err := <-done:
		t.Fatalf("the other sandbox: %v", err)
	}
	c := amd64Run(t, forkBomb)
	c.MaxProcesses = 300
	var out strings.Builder
	c.Stdout, c.Stderr = &out, &out
	err := Run(t.Context(), c)
	var bound *BoundError
	if !errors.As(err, &bound) || !strings.Contains(out.String(), "refused after 29") {
		t.Errorf("err = %v, output %q; want the bound reached after some 298 forks, the other sandbox's not counted", err, out.String())
	}
	t.Logf("beside 250 tasks of another sandbox of the same id: %s", strings.TrimSpace(out.String()))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
