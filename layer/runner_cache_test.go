package layer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// countingNode puts first on PATH a node that counts its starts in a file and runs the real one.
func countingNode(t *testing.T) (wrapper, starts string) {
	t.Helper()
	real, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH")
	}
	bin := t.TempDir()
	starts = filepath.Join(bin, "starts")
	wrapper = filepath.Join(bin, "node")
	script := "#!/bin/sh\necho x >> " + starts + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return wrapper, starts
}

func countStarts(t *testing.T, file string) int {
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "x")
}

func TestDetectRunnerCachedStartsNodeOnce(t *testing.T) {
	wrapper, starts := countingNode(t)
	dir := t.TempDir()
	ctx := context.Background()

	first, err := DetectRunnerCached(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	asked := countStarts(t, starts)
	if asked == 0 {
		t.Fatal("the first detection started no node")
	}
	second, err := DetectRunnerCached(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := countStarts(t, starts); n != asked {
		t.Errorf("the second detection started node %d times; want none", n-asked)
	}
	if *first != *second {
		t.Errorf("cached runner %+v, want %+v", *second, *first)
	}

	// another binary at the same path (an upgrade) is asked again
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(wrapper, later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := DetectRunnerCached(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if n := countStarts(t, starts); n == asked {
		t.Error("a changed node binary was not asked again")
	}
}

func TestDetectRunnerCachedIgnoresADamagedRecord(t *testing.T) {
	npmTest(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "runner.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := DetectRunnerCached(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Node == "" || r.Npm == "" {
		t.Errorf("runner %+v lacks versions", *r)
	}
}
