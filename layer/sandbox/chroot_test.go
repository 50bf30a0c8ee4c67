package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/containerseccomp"
)

// changeLines are build.run's lines of layer's TestRunWithoutOverlay, and what an install script
// does with its binds: one run each, on one upper folder.
var changeLines = []string{
	"echo test > /etc/toa-run-test",
	"rm /etc/debian_version",
	"rm -rf /etc/skel && mkdir /etc/skel && echo replaced > /etc/skel/README",
	"rm -rf /etc/update-motd.d",
	"chmod 600 /etc/host.conf",
	"ln -s toa-run-test /etc/toa-link && mkdir -p /opt/toa/new && : > /opt/toa/new/empty && chmod 4755 /opt/toa/new/empty",
	"rm /etc/issue && ln -s issue.net /etc/issue",
	"cat /toa-plan/plan.json > /composition/app/copied && echo built > /composition/app/build/out.txt && rm /composition/app/old.txt",
	"cp /toa-plan/plan.json /etc/plan-copy && cat /etc/resolv.conf > /dev/null && echo $(id -u) > /composition/app/uid",
}

// bindsFor makes a writable folder (an install's, with a file the lines remove) and a read-only
// one (a plan) under dir, and returns their binds.
func bindsFor(t *testing.T, dir string, uid int) []Bind {
	t.Helper()
	app, plan := filepath.Join(dir, "app"), filepath.Join(dir, "plan")
	for _, d := range []string{filepath.Join(app, "build"), plan} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(app, "old.txt"), []byte("old\n"), 0o644)
	os.WriteFile(filepath.Join(plan, "plan.json"), []byte(`{"plan":1}`), 0o600) // readable by its owner alone
	for _, p := range []string{dir, app, filepath.Join(app, "build"), filepath.Join(app, "old.txt")} {
		os.Lchown(p, uid, uid)
	}
	return []Bind{{Source: app, Target: "/composition/app"}, {Source: plan, Target: "/toa-plan", ReadOnly: true}}
}

// bindTree lists what a folder holds after the runs: names and bytes.
func bindTree(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			rel += fmt.Sprintf(" %q", data)
		}
		out = append(out, rel)
		return nil
	})
	return out
}

// TestChrootSameChanges runs the same lines the namespace way, the chroot way (taken by the test
// hook) and the chroot way where no namespace can be made (as root under a seccomp filter as a
// container's default profile): the changes are the same, entry for entry and byte for byte
// (what a layer holds of them), the writable bind holds what the lines wrote there, and the
// read-only one is as it was. The uid the lines see is the namespace's root, or the sandbox's
// id chrooted.
func TestChrootSameChanges(t *testing.T) {
	type result struct{ changes, app, plan []string }
	run := func(t *testing.T, who runAs, hook bool) result {
		root := debianRoot(t, "amd64", SandboxIDs())
		dir := userDir(t, 0)
		upper := filepath.Join(dir, "upper")
		os.Mkdir(upper, 0o755)
		binds := bindsFor(t, dir, 0)
		in := helperIn{Command: helperCommand{Root: root, Upper: upper, Platform: "linux/amd64", Args: []string{"/bin/sh", "-c", changeLines[0]},
			Env: debianEnv, Binds: binds}, Changes: true}
		for _, line := range changeLines[1:] {
			in.Then = append(in.Then, []string{"/bin/sh", "-c", line})
		}
		if hook {
			who.env = append(who.env, NoNamespacesEnv+"=1")
		}
		out, text := helper(t, who, in)
		if out.Err != "" {
			t.Fatalf("%s\n%s", out.Err, text)
		}
		chrooted := slices.ContainsFunc(out.Notices, func(n string) bool { return strings.Contains(n, "runs chrooted in a private copy") })
		if chrooted != (hook || who.profile != "") {
			t.Errorf("chrooted %v: %q", chrooted, out.Notices)
		}
		return result{out.Changes, bindTree(t, binds[0].Source), bindTree(t, binds[1].Source)}
	}
	namespaces := run(t, runAs{}, false)
	t.Logf("the namespace way: %d changes", len(namespaces.changes))
	for _, tc := range []struct {
		name string
		who  runAs
		hook bool
	}{
		{"the chroot way", runAs{}, true},
		{"no namespace can be made", runAs{profile: containerseccomp.DenyNamespaces}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.who, tc.hook)
			if a, b := strings.Join(namespaces.changes, "\n"), strings.Join(got.changes, "\n"); a != b {
				t.Errorf("the changes differ:\nnamespaces:\n%s\n%s:\n%s", a, tc.name, b)
			}
			uid := fmt.Sprintf("uid \"%d\\n\"", SandboxIDs().UID)
			wantApp := strings.Join(namespaces.app, "\n")
			wantApp = strings.Replace(wantApp, `uid "0\n"`, uid, 1)
			if gotApp := strings.Join(got.app, "\n"); gotApp != wantApp {
				t.Errorf("the writable bind holds:\n%s\nwant:\n%s", gotApp, wantApp)
			}
			if !slices.Equal(got.plan, []string{`plan.json "{\"plan\":1}"`}) {
				t.Errorf("the read-only bind holds %q", got.plan)
			}
		})
	}
	for _, want := range []string{"-etc/debian_version", "etc/skel drwxr-xr-x opaque", `etc/toa-run-test -rw-r--r-- "test\n"`, "etc/plan-copy"} {
		if !slices.ContainsFunc(namespaces.changes, func(c string) bool { return strings.HasPrefix(c, want) }) {
			t.Errorf("the changes lack %q: %q", want, namespaces.changes)
		}
	}
	for _, unwanted := range []string{"dev", "proc", "toa-plan/", "composition/app/"} {
		if slices.ContainsFunc(namespaces.changes, func(c string) bool { return strings.HasPrefix(c, unwanted) }) {
			t.Errorf("the changes hold %s: %q", unwanted, namespaces.changes)
		}
	}
}

// TestNoNamespaces: where no namespace can be made, or nothing mounted in one (a seccomp filter as
// a container's default profile; one that refuses mount alone, as a user namespace without
// capabilities is, under Ubuntu 24.04's AppArmor restriction), an unprivileged user gets the
// runner's error with issue 36's three ways out from CheckUserNamespaces and from Run, before
// the command runs; root passes the check and runs the command chrooted.
func TestNoNamespaces(t *testing.T) {
	root := debianRoot(t, "amd64", SandboxIDs())
	for _, tc := range []struct {
		name    string
		who     runAs
		refused bool
		words   string
	}{
		{"user, no namespace", runAs{uid: testUID, profile: containerseccomp.DenyNamespaces}, true, "a seccomp filter refuses them"},
		{"user, no mount", runAs{uid: testUID, profile: containerseccomp.DenyMount}, true, "it lets toa-push make user namespaces but not mount in them (make the mounts private: operation not permitted"},
		{"root, no namespace", runAs{profile: containerseccomp.DenyNamespaces}, false, ""},
		{"root, no mount", runAs{profile: containerseccomp.DenyMount}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debianRoot(t, "amd64", userIDs(tc.who.uid))
			probe, text := helper(t, tc.who, helperIn{Command: helperCommand{Platform: "linux/amd64"}, Probe: true})
			if tc.refused != probe.Runner || !strings.Contains(probe.Err, tc.words) {
				t.Fatalf("CheckUserNamespaces: %q, want refused %v with %q\n%s", probe.Err, tc.refused, tc.words, text)
			}
			dir := userDir(t, tc.who.uid)
			upper := filepath.Join(dir, "upper")
			os.Mkdir(upper, 0o755)
			os.Lchown(upper, tc.who.uid, tc.who.uid)
			binds := bindsFor(t, dir, tc.who.uid)
			out, text := helper(t, tc.who, helperIn{Command: helperCommand{Root: root, Upper: upper, Platform: "linux/amd64",
				Args: []string{"/bin/sh", "-c", "echo ran > /composition/app/ran"}, Env: debianEnv, Binds: binds}})
			_, ranErr := os.Stat(filepath.Join(binds[0].Source, "ran"))
			if !tc.refused {
				if out.Err != "" || ranErr != nil {
					t.Errorf("root: %s, %v\n%s", out.Err, ranErr, text)
				}
				return
			}
			if out.Err != probe.Err || ranErr == nil {
				t.Errorf("Run: %q (the command ran: %v), want CheckUserNamespaces's %q", out.Err, ranErr == nil, probe.Err)
			}
			for _, want := range []string{
				"cannot build for linux/amd64 inside its base on this runner: ",
				"toa-push runs as user 4242, not root, so it cannot run the base's programs chrooted as another user instead",
				"run the job as root in its container", "or allow user namespaces on the runner", "or pass --scripts-on-runner",
			} {
				if !strings.Contains(out.Err, want) {
					t.Errorf("the error lacks %q: %s", want, out.Err)
				}
			}
		})
	}
}

// TestSandboxIDs: root's sandbox is root's first subordinate id, else 100000, else (a rootless
// container's 65536 ids) the highest id below nobody's; the root of a namespace that maps it
// alone keeps its own.
func TestSandboxIDs(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	full := file("full", "         0          0 4294967295\n")
	rootless := file("rootless", "         0       1000          1\n         1     100000      65536\n")
	alone := file("alone", "         0       1000          1\n")
	subuid := file("subuid", "builder:100000:65536\nroot:231072:65536\n")
	none := file("none", "builder:100000:65536\n")
	for _, tc := range []struct {
		name, sub, nsMap string
		want             int
		err              bool
	}{
		{"root's range", subuid, full, 231072, false},
		{"no range of root's", none, full, DefaultSandboxID, false},
		{"no subuid", filepath.Join(dir, "missing"), full, DefaultSandboxID, false},
		{"a rootless container", none, rootless, 65533, false},
		{"root's range not mapped", subuid, rootless, 65533, false},
		{"one id mapped", none, alone, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rootID(tc.sub, tc.nsMap)
			if (err != nil) != tc.err || (!tc.err && got != tc.want) {
				t.Errorf("rootID = %d, %v; want %d (an error: %v)", got, err, tc.want, tc.err)
			}
		})
	}
	ids := SandboxIDs()
	if os.Geteuid() == 0 && (ids.UID == 0 || ids.GID == 0 || !ids.Root) {
		t.Errorf("as root: %+v, want another id", ids)
	}
}

// TestChrootLinksNotFollowed: a command chrooted in a copy owns the copy's root, and may put a link
// where /dev was, to a folder of the runner's; the next run of the copy (build.run's next line)
// makes /dev again there, and the runner's folder is left whole. A base whose /dev is a link is
// refused before anything runs.
func TestChrootLinksNotFollowed(t *testing.T) {
	needRoot(t, "it runs the sandbox chrooted")
	t.Setenv(NoNamespacesEnv, "1")
	victim := userDir(t, 0)
	os.WriteFile(filepath.Join(victim, "precious"), []byte("the runner's"), 0o644)
	c := amd64Run(t, "mv /dev /dev.old && ln -s "+victim+" /dev && ln -s "+victim+" /proc.new && mv /proc /proc.old && mv /proc.new /proc")
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	c.Args = []string{"/bin/sh", "-c", "ls /dev > /dev/null"}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(victim, "precious")); err != nil || string(data) != "the runner's" {
		t.Errorf("the runner's folder: %q, %v", data, err)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 1 {
		t.Errorf("the runner's folder holds %d entries", len(entries))
	}
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "proc"), 0o755)
	os.Symlink("/etc", filepath.Join(root, "dev"))
	err := Run(t.Context(), Command{Root: root, Upper: t.TempDir(), Platform: "linux/" + runtime.GOARCH, Args: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "the base's /dev is a link, not a folder") {
		t.Errorf("a base whose /dev is a link: %v", err)
	}
}
