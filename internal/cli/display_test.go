package cli

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

func TestPlainDisplayWritesALinePerChange(t *testing.T) {
	var buf bytes.Buffer
	d := NewPlainDisplay(&buf)
	d.Set("composition-front", "building")
	d.Set("composition-front", "building") // no change, no line
	d.Set("composition-back", "exists")
	d.Set("composition-front", "pushed")
	want := "composition-front: building\ncomposition-back: exists\ncomposition-front: pushed\n"
	if buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

func TestLiveDisplayRedrawsInPlace(t *testing.T) {
	var buf bytes.Buffer
	d := &Display{w: &buf, live: true, status: map[string]string{}}
	d.Set("a", "one")
	d.Set("bb", "two")
	want := "a  one\n\x1b[1A\x1b[Ja   one\nbb  two\n"
	if buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

func TestLiveDisplayCutsLinesToTheWidth(t *testing.T) {
	var buf bytes.Buffer
	d := &Display{w: &buf, live: true, width: 12, status: map[string]string{}}
	d.Set("a", "a long status")
	if want := "a  a long s…\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

func TestExitCodes(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{fault.BadInput(bytes.ErrTooLarge), 2},
		{fmt.Errorf("push: %w", fault.BadInput(bytes.ErrTooLarge)), 2},
		{fault.TimedOut(bytes.ErrTooLarge), 3},
		{fmt.Errorf("push: %w", context.DeadlineExceeded), 3},
		{bytes.ErrTooLarge, 1},
	}
	for _, c := range cases {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
