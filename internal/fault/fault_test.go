package fault

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestClassOf(t *testing.T) {
	sentinel := errors.New("sentinel")
	cases := []struct {
		name string
		err  error
		want Class
	}{
		{"plain", sentinel, ClassFailed},
		{"input", &Input{File: "context.toa.yaml", Key: "name", Message: "is empty"}, ClassInput},
		{"input wrapped", fmt.Errorf("load: %w", BadInput(sentinel)), ClassInput},
		{"timeout", TimedOut(sentinel), ClassTimeout},
		{"timeout wrapped", fmt.Errorf("push: %w", TimedOut(sentinel)), ClassTimeout},
		{"deadline", fmt.Errorf("push: %w", context.DeadlineExceeded), ClassTimeout},
		{"canceled", context.Canceled, ClassFailed},
	}
	for _, c := range cases {
		if got := ClassOf(c.err); got != c.want {
			t.Errorf("%s: ClassOf(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
}

func TestInputMessage(t *testing.T) {
	cases := []struct {
		err  *Input
		want string
	}{
		{&Input{File: "a/context.toa.yaml", Line: 3, Key: "registry.base", Message: "is not a reference", Hint: "write host/path"},
			"a/context.toa.yaml:3: registry.base: is not a reference\n  write host/path"},
		{&Input{Err: errors.New("--timeout must be positive")}, "--timeout must be positive"},
		{&Input{File: "x.yaml", Message: "m", Err: errors.New("hidden")}, "x.yaml: m"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	if !errors.Is(TimedOut(errors.New("x")), context.DeadlineExceeded) {
		t.Error("a Timeout is not a context.DeadlineExceeded")
	}
	if BadInput(nil) != nil || TimedOut(nil) != nil {
		t.Error("nil became an error")
	}
}

func TestControlCharactersEscaped(t *testing.T) {
	cases := []struct {
		err  *Input
		want string
	}{
		{&Input{File: "context.toa.yaml", Line: 1, Key: "name", Message: "'sh\x1b[31mop' is not a valid context name"},
			`context.toa.yaml:1: name: 'sh\x1b[31mop' is not a valid context name`},
		{&Input{File: "comp\x07/manifest.toa.yaml", Key: "a\rb\nc", Message: "m"}, `comp\x07/manifest.toa.yaml: a\rb\nc: m`},
		{&Input{Message: "two\n    lines\tand \u202eevil \x9b \xff", Hint: "h\x00"}, "two\n    lines\tand \\u202eevil \\x9b \\xff\n  h\\x00"},
		{&Input{Message: "plain: café, 東京"}, "plain: café, 東京"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	if got := Printable("a\nb\tc\x7f"); got != `a\nb\tc\x7f` {
		t.Errorf("Printable: %q", got)
	}
}
