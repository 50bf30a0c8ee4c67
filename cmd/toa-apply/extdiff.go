package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/apply/diff"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// externalDiffEnv names the program --diff runs instead of printing its own diff, as kubectl
// diff reads it: "diff -u -N", "colordiff -u", "dyff between --omit-header".
const externalDiffEnv = "KUBECTL_EXTERNAL_DIFF"

// externalArg is what kubectl diff allows in the program's arguments: flags, no shell.
var externalArg = regexp.MustCompile(`^[a-zA-Z0-9-=]+$`)

// externalDiff runs command as kubectl diff runs it: on two folders, LIVE and MERGED, holding
// each object that would change as a YAML file named as kubectl names it (an object created is
// in MERGED only, one pruned in LIVE only). The program writes to w; its exit code 1 means it
// found differences, anything above 1 that it failed.
func externalDiff(ctx context.Context, command string, diffs []diff.ObjectDiff, w io.Writer) (differ bool, err error) {
	fields := strings.Fields(command)
	if len(fields) == 0 {
		return false, fault.BadInputf("%s is set but empty: name the diff program, like \"diff -u -N\"", externalDiffEnv)
	}
	for _, a := range fields[1:] {
		if !externalArg.MatchString(a) {
			return false, fault.BadInputf("%s=%q: the argument %q is not a flag (letters, digits, '-' and '='), which kubectl diff does not allow either", externalDiffEnv, command, a)
		}
	}
	dir, err := os.MkdirTemp("", "toa-apply-diff-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	live, merged := filepath.Join(dir, "LIVE"), filepath.Join(dir, "MERGED")
	for _, d := range []string{live, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return false, err
		}
	}
	for _, d := range diffs {
		for side, text := range map[string]string{live: d.Live, merged: d.Merged} {
			if text == "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(side, d.File), []byte(text), 0o600); err != nil {
				return false, err
			}
		}
	}
	cmd := exec.CommandContext(ctx, fields[0], append(fields[1:], live, merged)...)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return true, nil
	case errors.Is(err, exec.ErrNotFound):
		return false, fault.BadInputf("%s=%q: %s is not on PATH", externalDiffEnv, command, fields[0])
	}
	return false, fmt.Errorf("%s=%q: %w", externalDiffEnv, command, err)
}
