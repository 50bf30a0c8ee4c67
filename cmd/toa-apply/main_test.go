package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/cli"
)

// toa-apply --render prints what kustomize.Render renders: the reviewed golden file.
func TestRender(t *testing.T) {
	testdata := filepath.Join("..", "..", "manifest", "testdata")
	c := &applyCommand{Dir: filepath.Join(testdata, "written", "declared.default"), Render: true}
	var out bytes.Buffer
	if err := c.render(context.Background(), &out); err != nil {
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
		if err := c.render(context.Background(), &out); cli.ExitCode(err) != cli.ExitBadInput {
			t.Errorf("%s: %v, exit %d, want %d", dir, err, cli.ExitCode(err), cli.ExitBadInput)
		}
	}
}

// A kustomization toa-apply cannot read whole never hangs it: a named pipe is bad input (exit 2)
// at once, and a remote resource that does not answer ends with --timeout (exit 3).
func TestRenderBounded(t *testing.T) {
	fifo := t.TempDir()
	write := func(dir, name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(fifo, "kustomization.yaml", "resources: [objects.yaml]\n")
	if err := syscall.Mkfifo(filepath.Join(fifo, "objects.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := t.TempDir()
	write(remote, "kustomization.yaml", "resources: [http://"+silentServer(t)+"/objects.yaml]\n")

	for _, tc := range []struct {
		name string
		dir  string
		code int
	}{
		{"a named pipe", fifo, cli.ExitBadInput},
		{"a remote resource that does not answer", remote, cli.ExitTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &applyCommand{Dir: tc.dir, Render: true, Timeout: time.Second}
			start := time.Now()
			err := c.render(context.Background(), io.Discard)
			t.Logf("exit %d after %s: %v", cli.ExitCode(err), time.Since(start).Round(time.Millisecond), err)
			if cli.ExitCode(err) != tc.code {
				t.Errorf("exit %d, want %d", cli.ExitCode(err), tc.code)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s with --timeout 1s", took)
			}
		})
	}
}
