package sandbox

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/containerseccomp"
)

// TestHostile runs a command that looks for the runner in every way issue 36 found open
// (testdata/hostile.py: the runner's files by path and through the init's /proc/1/root, /cwd,
// /fd and /environ, the parents' command lines and environments, the kernel's knobs in /proc/sys,
// mounts, namespaces, ptrace, the host's /etc/shadow), in both Debian bases (arm64 under QEMU),
// as root (the sandbox is then an unprivileged id) and as an unprivileged user, and as root where
// no namespace can be made (a seccomp filter as a container's default profile: chrooted in a
// copy). It finds nothing, everything it tries is refused, and the host's name and core_pattern
// stay as they were.
func TestHostile(t *testing.T) {
	hostname, _ := os.Hostname()
	corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	hostShadow := ""
	if data, err := os.ReadFile("/etc/shadow"); err == nil {
		sum := sha256.Sum256(data)
		hostShadow = hex.EncodeToString(sum[:])
	}
	script, err := os.ReadFile(filepath.Join("testdata", "hostile.py"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, arch string
		who        runAs
		uid        int // inside
	}{
		{"root/amd64", "amd64", runAs{}, 0},
		{"root/arm64", "arm64", runAs{}, 0},
		{"user/amd64", "amd64", runAs{uid: testUID}, 0},
		{"user/arm64", "arm64", runAs{uid: testUID}, 0},
		{"root without namespaces/amd64", "amd64", runAs{profile: containerseccomp.DenyNamespaces}, SandboxIDs().UID},
		{"root without namespaces/arm64", "arm64", runAs{profile: containerseccomp.DenyNamespaces}, SandboxIDs().UID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := debianRoot(t, tc.arch, userIDs(tc.who.uid))
			secrets := map[string]string{"env": random(), "arg": random(), "content": random(), "name": "toa-secret-" + random()}
			home := userDir(t, tc.who.uid)
			secrets["path"] = filepath.Join(home, ".docker", secrets["name"])
			os.MkdirAll(filepath.Dir(secrets["path"]), 0o700)
			if err := os.WriteFile(secrets["path"], []byte(secrets["content"]), 0o600); err != nil {
				t.Fatal(err)
			}
			probe := userDir(t, 0)
			os.WriteFile(filepath.Join(probe, "hostile.py"), script, 0o644)
			os.WriteFile(filepath.Join(probe, "secrets.json"), []byte(mustJSON(secrets)), 0o644)
			work := userDir(t, tc.who.uid)
			upper, out := filepath.Join(work, "upper"), filepath.Join(work, "out")
			for _, d := range []string{upper, out} {
				os.Mkdir(d, 0o755)
				os.Lchown(d, tc.who.uid, tc.who.uid)
			}
			who := tc.who
			who.env = []string{"HOME=" + home, "TOA_SIGN_KEY=" + secrets["env"], "COSIGN_PASSWORD=" + secrets["env"]}
			said, text := helper(t, who, helperIn{Command: helperCommand{Root: root, Upper: upper, Platform: "linux/" + tc.arch,
				Args:  []string{"python3", "/toa-hostile/hostile.py"},
				Env:   []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"},
				Binds: []Bind{{Source: probe, Target: "/toa-hostile", ReadOnly: true}, {Source: out, Target: "/toa-out"}}}}, "--sign-key="+secrets["arg"])
			if said.Err != "" {
				t.Fatalf("%s\n%s", said.Err, text)
			}
			lines := strings.Split(strings.TrimSpace(text), "\n")
			var got struct {
				Results map[string]string
				Found   []string
				UID     int
				Facts   struct {
					Descriptors []int
					ProcMounts  map[string]string `json:"proc mounts"`
					NoProc      string            `json:"no /proc"`
				}
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
				t.Fatalf("the hostile command said: %v\n%s", err, text)
			}
			if len(got.Found) > 0 {
				t.Errorf("the command found the runner's secrets: %q", got.Found)
			}
			for attempt, result := range got.Results {
				switch {
				case strings.HasPrefix(result, "denied: "):
				case attempt == "read /proc/kcore" && result == "ok: 0", attempt == "read /proc/keys" && result == "ok: 0":
					// masked: /dev/null
				case attempt == "/etc/shadow" && result != "ok: "+hostShadow:
					// the base's own
				case attempt == "write the read-only bind" && tc.who.profile != "":
					// chrooted, a copy of the command's own, which goes (the runner's, below, is as it was)
				default:
					t.Errorf("%s: %s", attempt, result)
				}
			}
			if tc.who.profile != "" {
				if got.Facts.NoProc != "ENOENT" {
					t.Errorf("chrooted, the command has a /proc: %+v", got.Facts)
				}
			} else {
				// 0, 1, 2, and the folder that lists them
				if len(got.Facts.Descriptors) != 4 || got.Facts.Descriptors[2] != 2 {
					t.Errorf("the command holds the descriptors %v, want 0, 1, 2 and its own", got.Facts.Descriptors)
				}
				for p, options := range got.Facts.ProcMounts {
					masked := slices.Contains(procMasked, strings.TrimPrefix(p, "/proc/"))
					if (masked && options == "not mounted") || (!masked && !strings.HasPrefix(options, "ro,")) {
						t.Errorf("%s is mounted %q, want it read-only or masked", p, options)
					}
				}
				if len(got.Facts.ProcMounts) < 5 {
					t.Errorf("/proc's knobs: %v", got.Facts.ProcMounts)
				}
			}
			if got.UID != tc.uid {
				t.Errorf("the command ran as %d, want %d", got.UID, tc.uid)
			}
			if len(got.Results) < 20 {
				t.Errorf("the command tried %d things, want all of testdata/hostile.py's: %v", len(got.Results), got.Results)
			}
			if entries, _ := os.ReadDir(probe); len(entries) != 2 {
				t.Errorf("the read-only bind's folder holds %d entries, want its 2", len(entries))
			}
			// never the runner's root: what it wrote is the sandbox's id's
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(out, "made"), &st); err != nil ||
				(tc.who.uid == 0 && st.Uid == 0) || (tc.who.uid != 0 && int(st.Uid) != tc.who.uid) {
				t.Errorf("the file the command made is %d's (%v), want the sandbox's id's, never root's", st.Uid, err)
			}
			t.Logf("%s: %d attempts refused, its file %d's; %q", tc.name, len(got.Results), st.Uid, said.Notices)
		})
	}
	if now, _ := os.Hostname(); now != hostname {
		t.Errorf("the host's name is %q, was %q", now, hostname)
	}
	if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(now) != string(corePattern) {
		t.Errorf("the host's core_pattern is %q, was %q", now, corePattern)
	}
}

func random() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
