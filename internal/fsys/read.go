// Package fsys is the ground floor under both chains: how toa-deploy touches the file system.
// Reads of the user's files are bounded and never block (ReadFile, Open); what toa-deploy writes
// goes whole or not at all (WriteFile, Create, ReplaceDir); and every cache is named in one
// table (Caches), with its folder, its key and its bound, and pruned to TOA_CACHE_MAX (Prune).
// It imports nothing of the project but fault.
package fsys

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// The most toa-deploy reads of each of the user's files: far above any real one, low enough that
// a wrong file (a log, a dump, a link to a device) is refused at once instead of filling memory.
const (
	MaxYAMLSize    = 1 << 20   // context.toa.yaml, manifest.toa.yaml
	MaxPackageSize = 4 << 20   // package.json, .npmrc
	MaxLockSize    = 64 << 20  // package-lock.json, npm-shrinkwrap.json: a large monorepo's is some MiB
	MaxTarballSize = 256 << 20 // a package tarball a `file:` dependency names (npm pack's output)
)

// ReadFile reads one of the user's files, following links: only a regular file is read, and only
// when it holds at most limit bytes; anything else is an *fault.Input naming the file and why.
// A named pipe would block the read forever and a device (/dev/zero) would never end it. A file
// that does not exist is an error that wraps fs.ErrNotExist.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, -1, limit) // it grew after the check
	}
	return data, nil
}

// Open opens one of the user's files for reading, as ReadFile reads it: a regular file (a link to
// one is followed) of at most limit bytes, opened without blocking, so that a named pipe put in
// its place between the check and the open never stops the run. A reader that must not pass the
// limit should read through io.LimitReader(f, limit+1) and refuse the extra byte (the file may
// grow after the check).
func Open(path string, limit int64) (*os.File, error) {
	if err := CheckFile(path, limit); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should the file become a pipe after the check, opening it still returns
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, info)
	}
	if info.Size() > limit {
		f.Close()
		return nil, tooLarge(path, info.Size(), limit)
	}
	return f, nil
}

// CheckFile says, without reading it, whether ReadFile would read path: a regular file of at most
// limit bytes.
func CheckFile(path string, limit int64) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return notRegular(path, info)
	}
	if info.Size() > limit {
		return tooLarge(path, info.Size(), limit)
	}
	return nil
}

// Kind names what a file that is not a regular one is: "a named pipe (FIFO)", "a socket", "a
// device", "a folder", else "not a regular file".
func Kind(info fs.FileInfo) string {
	switch mode := info.Mode(); {
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeDevice != 0:
		return "a device"
	case mode.IsDir():
		return "a folder"
	}
	return "not a regular file"
}

func notRegular(path string, info fs.FileInfo) error {
	what := Kind(info)
	message := "is " + what + ", not a regular file"
	if what == "not a regular file" {
		message = "is not a regular file"
	}
	if link, err := os.Lstat(path); err == nil && link.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			target, _ = os.Readlink(path)
		}
		message = fmt.Sprintf("links to %s, which %s", target, message)
	}
	return &fault.Input{File: path, Message: message,
		Hint: "toa-deploy reads only regular files: put the file itself here"}
}

// TooLarge is the *fault.Input for a file of path that holds more than limit bytes (size, or -1
// when it was found to grow past limit while it was read).
func TooLarge(path string, size, limit int64) error { return tooLarge(path, size, limit) }

func tooLarge(path string, size, limit int64) error {
	message := fmt.Sprintf("is larger than %s, the most toa-deploy reads of a %s", bytesText(limit), filepath.Base(path))
	if size >= 0 {
		message = fmt.Sprintf("is %s, more than the %s toa-deploy reads of a %s", bytesText(size), bytesText(limit), filepath.Base(path))
	}
	return &fault.Input{File: path, Message: message, Hint: "check that this is the file you meant"}
}

// BytesText writes a size the way a user reads it: 1 MiB, 1.5 MiB, 12 KiB, 300 bytes.
func BytesText(n int64) string { return bytesText(n) }

func bytesText(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	value, unit := float64(n)/1024, units[0]
	for i := 1; i < len(units) && value >= 1024; i++ {
		value, unit = value/1024, units[i]
	}
	if value == float64(int64(value)) {
		return fmt.Sprintf("%d %s", int64(value), unit)
	}
	if rounded := fmt.Sprintf("%.1f", value); !strings.HasSuffix(rounded, ".0") {
		return rounded + " " + unit
	}
	return fmt.Sprintf("%d bytes", n) // 1 MiB and a byte is not "1.0 MiB"
}

// ReadJSON reads one of the user's JSON files (ReadFile) into v. A file that is not JSON, or
// whose values are not of the types v has, is an *fault.Input naming the line and the key.
func ReadJSON(path string, limit int64, v any) ([]byte, error) {
	data, err := ReadFile(path, limit)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return nil, BadJSON(path, data, err)
	}
	return data, nil
}

// BadJSON turns what encoding/json says of data, read from path, into a message with the line.
func BadJSON(path string, data []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return &fault.Input{File: path, Line: LineAt(data, syntax.Offset),
			Message: "is not valid JSON: " + strings.TrimPrefix(syntax.Error(), "json: "),
			Hint:    "check this line and the one above it: a missing comma or quote is the usual cause"}
	case errors.As(err, &typ):
		return &fault.Input{File: path, Line: LineAt(data, typ.Offset), Key: typ.Field,
			Message: fmt.Sprintf("must be %s, not %s", jsonType(typ.Type), describeJSON(typ.Value))}
	}
	return &fault.Input{File: path, Message: "is not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
}

// LineAt is the 1-based line of the byte at offset in data.
func LineAt(data []byte, offset int64) int {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	return bytes.Count(data[:offset], []byte("\n")) + 1
}

func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "a number"
	}
	return "a " + t.String()
}

// describeJSON names what encoding/json found: "bool", "array", "number -5".
func describeJSON(value string) string {
	kind, _, _ := strings.Cut(value, " ")
	switch kind {
	case "object", "array":
		return "an " + kind
	case "bool":
		return "a boolean"
	}
	return "a " + kind
}
