package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/containerseccomp"
	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// testUID is the unprivileged user the tests run the sandbox as, through a subprocess of the
// test binary (runAs): an id no account has, so that what it can reach is what any user can.
const testUID = 4242

// shared is the folder of what the tests share: the Debian bases unpacked once.
var shared struct {
	once sync.Once
	dir  string
	err  error
	mu   sync.Mutex
	// roots are the unpacked bases by architecture, owners the ids they were given last.
	roots  map[string]string
	owners map[string]IDs
}

// debianRoot is the Debian base of arch unpacked once for the package's tests, given to ids:
// the sandbox's ids of the user a test runs it as (the tests run one at a time).
func debianRoot(t *testing.T, arch string, ids IDs) string {
	t.Helper()
	img := debianbase.Image(t, arch) // skips where the base is not made
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "toa-sandbox-tests-")
		if shared.err == nil {
			shared.err = os.Chmod(shared.dir, 0o755) // passable by testUID
		}
		shared.roots, shared.owners = map[string]string{}, map[string]IDs{}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	root, ok := shared.roots[arch]
	if !ok {
		cache := filepath.Join(shared.dir, arch)
		start := time.Now()
		var err error
		if root, err = Unpack(context.Background(), img, cache); err != nil {
			t.Fatal(err)
		}
		t.Logf("unpacked the %s base in %s", arch, time.Since(start).Round(time.Millisecond))
		for p := root; p != shared.dir; p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		shared.roots[arch] = root
		shared.owners[arch] = SandboxIDs() // Unpack gave it to them
	}
	owner := ids
	owner.Root = os.Geteuid() == 0 // root gives it to whoever runs the sandbox; a user's is its own
	if shared.owners[arch] == owner {
		return root
	}
	if err := owner.Own(root); err != nil {
		t.Fatal(err)
	}
	shared.owners[arch] = owner
	return root
}

// userDir is a folder the test's user (testUID, or root) may write in, removed after the test.
func userDir(t *testing.T, uid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "toa-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(dir, uid, uid); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	return dir
}

// needRoot skips a test that runs the sandbox as another user, or chrooted, where the tests do
// not run as root (CI and make test run them as root).
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("%s: the test needs root", why)
	}
}

// userIDs are the sandbox's ids when the tests run it as uid.
func userIDs(uid int) IDs {
	if uid == 0 {
		return SandboxIDs()
	}
	return IDs{UID: uid, GID: uid}
}

// runAs is who runs a helper subprocess: root or testUID, and under which seccomp profile.
type runAs struct {
	uid     int
	profile containerseccomp.Profile
	env     []string
}

func (a runAs) String() string {
	who := "root"
	if a.uid != 0 {
		who = fmt.Sprintf("user %d", a.uid)
	}
	if a.profile != "" {
		who += fmt.Sprintf(" under the seccomp profile %q", a.profile)
	}
	return who
}

// helperIn is what TestHelper runs: a Command, or CheckUserNamespaces.
type helperIn struct {
	Command helperCommand
	// Then are more commands run after it while it works, with its Upper (build.run's lines).
	Then    [][]string
	Probe   bool // CheckUserNamespaces for Command.Platform instead
	Changes bool // list the changes after the runs
}

// helperCommand is a Command without what JSON cannot say.
type helperCommand struct {
	Root, Upper, Platform string
	Args, Env             []string
	Dir                   string
	Binds                 []Bind
	Network               Network
	MaxProcesses          int
	MaxFileSize, MaxWrite int64
	Timeout               time.Duration
}

func (h helperCommand) command() Command {
	return Command{Root: h.Root, Upper: h.Upper, Platform: h.Platform, Args: h.Args, Env: h.Env, Dir: h.Dir, Binds: h.Binds,
		Network: h.Network, MaxProcesses: h.MaxProcesses, MaxFileSize: h.MaxFileSize, MaxWrite: h.MaxWrite, Timeout: h.Timeout}
}

// helperOut is what TestHelper says.
type helperOut struct {
	Err       string
	Runner    bool   // the error is a *RunnerError
	Bound     string // a *BoundError's
	Exit      int    // an *ExitError's code
	Leftovers []string
	Notices   []string
	Changes   []string
}

const helperEnv = "TOA_SANDBOX_TEST_HELPER"

// TestHelper is the test binary run again, as another user or under a seccomp filter (runAs):
// it does what helperEnv says and prints the result. It is no test of its own.
func TestHelper(t *testing.T) {
	data, ok := os.LookupEnv(helperEnv)
	if !ok {
		t.Skip("the subprocess of the tests that run the sandbox as another user")
	}
	var in helperIn
	if err := json.Unmarshal([]byte(data), &in); err != nil {
		t.Fatal(err)
	}
	var out helperOut
	c := in.Command.command()
	c.Leftovers = func(l []string) { out.Leftovers = l }
	c.Notice = func(s string) { out.Notices = append(out.Notices, s) }
	var output bytes.Buffer
	c.Stdout, c.Stderr = &output, &output
	var err error
	if in.Probe {
		err = CheckUserNamespaces(context.Background(), c.Platform)
	} else {
		err = Run(context.Background(), c)
		for _, args := range in.Then {
			if err != nil {
				break
			}
			c.Args = args
			err = Run(context.Background(), c)
		}
	}
	out.describe(err)
	if in.Changes && err == nil {
		out.Changes = listChanges(t, c.Root, c.Upper)
	}
	fmt.Printf("%s\nHELPER %s\n", output.String(), mustJSON(out))
}

func (o *helperOut) describe(err error) {
	if err == nil {
		return
	}
	o.Err = err.Error()
	var runner *RunnerError
	var bound *BoundError
	var exit *ExitError
	switch {
	case errors.As(err, &runner):
		o.Runner = true
	case errors.As(err, &bound):
		o.Bound = bound.Bound
	case errors.As(err, &exit):
		o.Exit = exit.Code
	}
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// helper runs TestHelper as who says, with args after the test binary's flags (they show in
// its command line), and returns what it said and its whole output.
func helper(t *testing.T, who runAs, in helperIn, args ...string) (helperOut, string) {
	t.Helper()
	needRoot(t, "it runs the sandbox as "+who.String())
	argv := append([]string{"-test.run=^TestHelper$", "-test.count=1", "--"}, args...)
	var cmd *exec.Cmd
	if who.profile != "" {
		cmd = containerseccomp.Command(t.Context(), who.profile, "/proc/self/exe", argv...)
	} else {
		cmd = exec.CommandContext(t.Context(), "/proc/self/exe", argv...)
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, helperEnv+"="+mustJSON(in))
	if who.uid != 0 {
		home := userDir(t, who.uid)
		cmd.Env = append(cmd.Env, "HOME="+home, "TMPDIR="+home)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(who.uid), Gid: uint32(who.uid), Groups: []uint32{}}}
	}
	cmd.Env = append(cmd.Env, who.env...) // the last of a name wins
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	text := string(out)
	i := strings.LastIndex(text, "\nHELPER ")
	if i < 0 {
		t.Fatalf("the helper as %s: %v\n%s", who, err, text)
	}
	var result helperOut
	said, _, _ := strings.Cut(text[i+len("\nHELPER "):], "\n")
	if err := json.Unmarshal([]byte(said), &result); err != nil {
		t.Fatalf("the helper as %s said: %v\n%s", who, err, text)
	}
	return result, text[:i]
}

// listChanges is Changes as lines: "-name" for a whiteout, name, mode, opaque, and the bytes or
// the link, as a layer would hold them.
func listChanges(t testing.TB, root, upper string) []string {
	var out []string
	err := Changes(root, upper, func(c Change) error {
		if c.Whiteout {
			out = append(out, "-"+c.Name)
			return nil
		}
		line := fmt.Sprintf("%s %v", c.Name, c.Info.Mode())
		switch {
		case c.Opaque:
			line += " opaque"
		case c.Info.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(c.Path)
			if err != nil {
				return err
			}
			line += " -> " + link
		case c.Info.Mode().IsRegular():
			data, err := os.ReadFile(c.Path)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %q", data)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
