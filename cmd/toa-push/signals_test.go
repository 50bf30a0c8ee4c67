package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// TestSignalsEndARun: toa-push blocked where its context does not reach (a Docker credential
// helper that never answers, run by the registry library) ends within a second of a second
// SIGINT, or of a SIGTERM, exit 1, leaving no tag.
func TestSignalsEndARun(t *testing.T) {
	for _, c := range []struct {
		name    string
		signals []syscall.Signal
	}{
		{"second SIGINT", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}},
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}},
	} {
		t.Run(c.name, func(t *testing.T) {
			registry := harness.MemoryRegistry(t)
			harness.PushRandomBase(t, registry+"/bases/node:test", "linux/amd64")
			dir, _ := localsApp(t, registry)
			bin := t.TempDir()
			started := filepath.Join(bin, "asked")
			helper := "#!/bin/sh\ntouch " + started + "\nexec sleep 30\n"
			if err := os.WriteFile(filepath.Join(bin, "docker-credential-hang"), []byte(helper), 0o755); err != nil {
				t.Fatal(err)
			}
			docker := t.TempDir()
			if err := os.WriteFile(filepath.Join(docker, "config.json"), []byte(`{"credsStore": "hang"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(binary, "--path", dir, "-k", filepath.Join(dir, "deployment"))
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TOA_ENV=", "CI=true", "TOA_CACHE="+t.TempDir(), "DOCKER_CONFIG="+docker,
				"PATH="+bin+":"+os.Getenv("PATH"))
			// a file, not a pipe: the helper's sleep, orphaned, keeps a pipe open past the exit
			stderr := &fileText{path: filepath.Join(t.TempDir(), "stderr")}
			f, err := os.Create(stderr.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd.Stderr = f
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			deadline := time.Now().Add(60 * time.Second)
			for !exists(started) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if !exists(started) {
				cmd.Process.Kill()
				t.Fatalf("the credential helper was never asked:\n%s", stderr.String())
			}
			time.Sleep(200 * time.Millisecond) // blocked on it
			for _, s := range c.signals[:len(c.signals)-1] {
				cmd.Process.Signal(s)
				time.Sleep(300 * time.Millisecond)
			}
			sent := time.Now()
			cmd.Process.Signal(c.signals[len(c.signals)-1])
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("still running 5 s after the signal:\n%s", stderr.String())
			}
			took := time.Since(sent)
			code := cmd.ProcessState.ExitCode()
			t.Logf("exit %d %s after the last signal: %s", code, took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
			if took > time.Second || code != 1 {
				t.Errorf("exit %d, %s after the signal; want 1 within a second", code, took)
			}
			if strings.Contains(stderr.String(), "goroutine ") {
				t.Errorf("a stack trace reached the user:\n%s", stderr.String())
			}
			noTags(t, registry, "shop/composition-front")
		})
	}
}

// fileText is a file's text, read when asked.
type fileText struct{ path string }

func (f *fileText) String() string { data, _ := os.ReadFile(f.path); return string(data) }
