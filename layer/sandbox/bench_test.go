package sandbox

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// debianGzip is the harness's Debian base for amd64 as an image of one gzip layer (level 1, as
// the harness pushes it), compressed into a folder of the benchmark's.
func debianGzip(b *testing.B) v1.Image {
	b.Helper()
	file := debianbase.File("amd64")
	in, err := os.Open(file)
	if err != nil {
		b.Skipf("no Debian base at %s: run bash testdata/qemu/install.sh (make setup does)", file)
	}
	defer in.Close()
	gz := filepath.Join(b.TempDir(), "debian.tar.gz")
	out, err := os.Create(gz)
	if err != nil {
		b.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(out, gzip.BestSpeed)
	if _, err := io.Copy(zw, in); err != nil {
		b.Fatal(err)
	}
	zw.Close()
	out.Close()
	l, err := tarball.LayerFromFile(gz)
	if err != nil {
		b.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		b.Fatal(err)
	}
	return img
}

// cpuTime is the processor time the process has taken so far, of all its threads: on a
// machine others share, a steadier figure than the time on the clock. The benchmarks report
// that of the unpacks alone (cpu-s/op).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUnpackDebian: the Debian base unpacked whole into an empty cache.
func BenchmarkUnpackDebian(b *testing.B) {
	img := debianGzip(b)
	var cpu time.Duration
	defer func() { b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op") }()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cache := b.TempDir()
		b.StartTimer()
		start := cpuTime()
		if _, err := Unpack(b.Context(), img, cache); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
		b.StopTimer()
		removeAll(cache)
		b.StartTimer()
	}
}

// smallLayer is a layer as a build.run line makes one: a few files, some hundreds of KiB.
func smallLayer(b *testing.B) v1.Layer {
	entries := []entry{{name: "usr/local/lib/tool/", kind: tar.TypeDir}}
	for i := range 50 {
		entries = append(entries, entry{name: fmt.Sprintf("usr/local/lib/tool/f%d.js", i), data: strings.Repeat("x", 8<<10), kind: tar.TypeReg})
	}
	entries = append(entries, entry{name: "etc/.wh.motd", kind: tar.TypeReg}, entry{name: "etc/tool.conf", data: "on", kind: tar.TypeReg})
	return layerOf(b, "gzip", entries...)
}

// BenchmarkUnpackDebianAndALayer: the Debian base and a small layer over it unpacked whole into
// an empty cache, as before a root was made over a cached one.
func BenchmarkUnpackDebianAndALayer(b *testing.B) {
	img, err := mutate.AppendLayers(debianGzip(b), smallLayer(b))
	if err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	defer func() { b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op") }()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cache := b.TempDir()
		b.StartTimer()
		start := cpuTime()
		if _, err := Unpack(b.Context(), img, cache); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
		b.StopTimer()
		removeAll(cache)
		b.StartTimer()
	}
}

// BenchmarkUnpackOverDebian: the same, with the Debian base's root in the cache: a copy of it in
// hard links and the small layer applied (extend).
func BenchmarkUnpackOverDebian(b *testing.B) {
	base := debianGzip(b)
	img, err := mutate.AppendLayers(base, smallLayer(b))
	if err != nil {
		b.Fatal(err)
	}
	cache := b.TempDir()
	if _, err := Unpack(b.Context(), base, cache); err != nil {
		b.Fatal(err)
	}
	key, err := ChainID(img)
	if err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	defer func() { b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op") }()
	b.ResetTimer()
	for range b.N {
		start := cpuTime()
		root, err := Unpack(b.Context(), img, cache)
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
		b.StopTimer()
		if filepath.Dir(root) != rootEntry(filepath.Join(cache, "roots"), key) {
			b.Fatalf("root %s", root)
		}
		removeAll(filepath.Dir(root))
		b.StartTimer()
	}
}
