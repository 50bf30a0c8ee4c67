package image

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestUnpackOrder: the bases of a CPU the runner emulates are unpacked first, each base once,
// and only those the work runs in whatever their libc.
func TestUnpackOrder(t *testing.T) {
	check := func(arch, digest string, whatever bool) *baseCheck {
		return &baseCheck{platform: "linux/" + arch, digest: digest, whateverLibc: whatever,
			target: Target{Platform: v1.Platform{OS: "linux", Architecture: arch}}}
	}
	checks := []*baseCheck{
		check("amd64", "sha256:a", true),
		check("amd64", "sha256:b", false), // the libc decides: looked for, not unpacked here
		check("arm64", "sha256:c", true),
		check("arm", "sha256:d", true),
		check("arm64", "sha256:c", true), // another image on the same base
	}
	var got []string
	for _, c := range unpackOrder(checks, "amd64") {
		got = append(got, c.digest)
	}
	want := []string{"sha256:c", "sha256:d", "sha256:a"}
	if len(got) != len(want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}
