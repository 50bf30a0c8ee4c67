package containerseccomp

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	Exec()
	os.Exit(m.Run())
}

// TestProfiles: under DenyNamespaces no user namespace can be made (unshare, and clone through
// a program that uses it); under DenyMount one can, and nothing can be mounted in it; either way
// a program runs, and without the filter all of it works.
func TestProfiles(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare on this machine")
	}
	makeNamespace := []string{"unshare", "--user", "--map-root-user", "true"}
	mountInIt := []string{"unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /mnt"}
	for _, tc := range []struct {
		profile   Profile
		name      string
		args      []string
		wantError string // "" for a command that works
	}{
		{DenyNamespaces, "no namespace", makeNamespace, "Operation not permitted"},
		{DenyNamespaces, "a plain program", []string{"true"}, ""},
		{DenyMount, "a namespace", makeNamespace, ""},
		{DenyMount, "no mount in it", mountInIt, "Operation not permitted"},
		{"", "without a filter", mountInIt, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), tc.args[0], tc.args[1:]...)
			if tc.profile != "" {
				cmd = Command(t.Context(), tc.profile, tc.args[0], tc.args[1:]...)
			}
			out, err := cmd.CombinedOutput()
			if tc.wantError == "" && err != nil {
				t.Errorf("%v under %q: %v\n%s", tc.args, tc.profile, err, out)
			}
			if tc.wantError != "" && (err == nil || !strings.Contains(string(out), tc.wantError)) {
				t.Errorf("%v under %q: %v, %q; want it refused with %q", tc.args, tc.profile, err, out, tc.wantError)
			}
		})
	}
}
