package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/cli"
)

// toa-apply --render prints what kustomize.Render renders: the reviewed golden file.
func TestRender(t *testing.T) {
	testdata := filepath.Join("..", "..", "manifest", "testdata")
	c := &applyCommand{Dir: filepath.Join(testdata, "written", "declared.default"), Render: true}
	var out bytes.Buffer
	if err := c.render(&out); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(testdata, "rendered", "declared.default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("rendered:\n%s", out.Bytes())
	}

	for _, dir := range []string{filepath.Join(testdata, "missing"), testdata} {
		c = &applyCommand{Dir: dir, Render: true}
		if err := c.render(&out); cli.ExitCode(err) != cli.ExitBadInput {
			t.Errorf("%s: %v, exit %d, want %d", dir, err, cli.ExitCode(err), cli.ExitBadInput)
		}
	}
}
