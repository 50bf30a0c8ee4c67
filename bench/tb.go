package main

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// tb lets the benchmark use internal/harness (the registry behind a recording proxy, the test
// bases) outside a test. Only the methods the harness calls are implemented; the embedded nil
// testing.TB supplies the unexported method and panics on any other.
type tb struct {
	testing.TB
	dir      string
	cleanups []func()
	ctx      context.Context
}

func newTB(ctx context.Context, dir string) *tb {
	testing.Init() // testing.Short, which the harness asks, needs the flags registered
	return &tb{dir: dir, ctx: ctx}
}

func (t *tb) Helper()                      {}
func (t *tb) Context() context.Context     { return t.ctx }
func (t *tb) Failed() bool                 { return false }
func (t *tb) Cleanup(f func())             { t.cleanups = append(t.cleanups, f) }
func (t *tb) Logf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
func (t *tb) Log(a ...any)                 { fmt.Fprintln(os.Stderr, a...) }
func (t *tb) Fatalf(format string, a ...any) {
	panic(fmt.Sprintf(format, a...))
}
func (t *tb) Fatal(a ...any)                 { panic(fmt.Sprint(a...)) }
func (t *tb) Skip(a ...any)                  { panic("skipped: " + fmt.Sprint(a...)) }
func (t *tb) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

func (t *tb) TempDir() string {
	dir, err := os.MkdirTemp(t.dir, "tb-")
	if err != nil {
		panic(err)
	}
	// the registry's storage: gigabytes after the memory benchmark
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// close runs the cleanups, the last registered first, as testing does.
func (t *tb) close() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}
