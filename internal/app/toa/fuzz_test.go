package toa

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// The fuzz targets of the two loaders of the user's YAML. `go test` runs them on their seeds
// (the contexts and manifests of testdata, and the corpus kept in testdata/fuzz); `make fuzz`,
// which `make test` runs, fuzzes each for a few seconds. Whatever the bytes, a loader returns
// within a bound, with either a value that JSON can carry to the extensions or an *fault.Input
// that names a file and prints no control character.

// FuzzContext loads a context.toa.yaml of the fuzzer's bytes, for the environment dev.
func FuzzContext(f *testing.F) {
	addSeeds(f, "../../../testdata/*/*/"+ContextFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ContextFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		var app *Application
		err := within(t, func() (err error) {
			app, err = Load(dir, "dev")
			return err
		})
		if err != nil {
			checkInputError(t, err)
			return
		}
		if _, err := json.Marshal(app.Annotations); err != nil {
			t.Errorf("the annotations cannot be written as JSON: %v", err)
		}
	})
}

// FuzzManifest loads a component whose manifest.toa.yaml holds the fuzzer's bytes.
func FuzzManifest(f *testing.F) {
	addSeeds(f, "../../../testdata/*/*/components/*/manifest.toa.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := filepath.Join(t.TempDir(), "shop.orders")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "manifest.toa.yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		var c *Component
		err := within(t, func() (err error) {
			c, err = LoadComponent(dir)
			return err
		})
		if err != nil {
			checkInputError(t, err)
			return
		}
		if _, err := json.Marshal(c.Values); err != nil {
			t.Errorf("the manifest cannot be written as JSON: %v", err)
		}
		if _, err := json.Marshal(c.Extensions); err != nil {
			t.Errorf("the extensions' sections cannot be written as JSON: %v", err)
		}
	})
}

// addSeeds adds the files pattern matches, read as the loaders read them.
func addSeeds(f *testing.F, pattern string) {
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds match %s: %v", pattern, err)
	}
	for _, file := range files {
		if data, err := fsys.ReadFile(file, fsys.MaxYAMLSize); err == nil {
			f.Add(data)
		}
	}
}

// within runs load, failing the test if it has not returned after a bound far above what any
// input takes (milliseconds): a loader must never hang.
func within(t *testing.T, load func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- load() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the loader did not return within 20s")
		return nil
	}
}

func checkInputError(t *testing.T, err error) {
	t.Helper()
	var input *fault.Input
	if !errors.As(err, &input) {
		t.Fatalf("not a bad-input error: %T %v", err, err)
	}
	if input.File == "" {
		t.Errorf("the error names no file: %v", err)
	}
	msg := err.Error()
	if !utf8.ValidString(msg) {
		t.Errorf("the message prints bytes that are not UTF-8: %q", msg)
	}
	for _, r := range msg {
		if r != '\n' && isControl(r) {
			t.Errorf("the message prints the control character %U: %q", r, msg)
			break
		}
	}
	for _, raw := range []string{"yaml: ", "json: ", "unmarshal errors"} {
		if strings.Contains(input.Message, raw) {
			t.Errorf("the message holds a library's text (%q): %s", raw, msg)
		}
	}
}

// isControl is what fault.Printable escapes.
func isControl(r rune) bool {
	return fault.Printable(string(r)) != string(r)
}
