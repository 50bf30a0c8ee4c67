package layer

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// text is n bytes that compress as source code does: words from a small vocabulary, the same
// for a seed.
func text(n int, seed uint64) []byte {
	words := strings.Fields("const function return require module exports async await this that if else for of in let var null undefined true false object string number")
	r := rand.New(rand.NewPCG(seed, seed))
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(12) == 0 {
			b.WriteString(fmt.Sprintf(" %d;\n", r.IntN(1000)))
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

func members(t testing.TB, c Compression, data []byte, procs int) []byte {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	var out bytes.Buffer
	w := newMemberWriter(&out, c)
	for p := data; len(p) > 0; { // in uneven writes, as a tar stream comes
		k := min(len(p), 100_000+len(p)%7777)
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A layer of MemberSize or less is the single gzip stream layers had before members: its digest
// is unchanged.
func TestSmallLayersAreOneGzipStream(t *testing.T) {
	for _, n := range []int{0, 1, 100_000, MemberSize} {
		data := text(n, 1)
		var single bytes.Buffer
		z, _ := gzip.NewWriterLevel(&single, CompressionLevel)
		z.Write(data)
		z.Close()
		if got := members(t, Gzip, data, 4); !bytes.Equal(got, single.Bytes()) {
			t.Errorf("%d bytes: %d bytes compressed, not the single stream's %d", n, len(got), single.Len())
		}
	}
}

// A large layer is members compressed on every core; its bytes are the same whatever the number
// of cores, every gzip and zstd reader reads it whole, and it costs little against one stream.
func TestLargeLayersAreMembers(t *testing.T) {
	data := text(3*MemberSize+12345, 2)
	for _, c := range []Compression{Gzip, Zstd} {
		one, four := members(t, c, data, 1), members(t, c, data, 4)
		if !bytes.Equal(one, four) {
			t.Errorf("%s: the bytes on 1 core differ from those on 4", c)
		}
		r, err := decompress(c, bytes.NewReader(four))
		if err != nil {
			t.Fatal(err)
		}
		back, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(back, data) {
			t.Errorf("%s: read back %d bytes of %d (%v)", c, len(back), len(data), err)
		}
		tool := map[Compression][]string{Gzip: {"gzip", "-dc"}, Zstd: {"zstd", "-dc"}}[c]
		if _, err := exec.LookPath(tool[0]); err == nil {
			cmd := exec.Command(tool[0], tool[1:]...)
			cmd.Stdin = bytes.NewReader(four)
			out, err := cmd.Output()
			if err != nil || sha256.Sum256(out) != sha256.Sum256(data) {
				t.Errorf("%s reads %d bytes of %d (%v)", tool[0], len(out), len(data), err)
			}
		}
		t.Logf("%s: %d bytes of %d", c, len(four), len(data))
	}
	var single bytes.Buffer
	z, _ := gzip.NewWriterLevel(&single, CompressionLevel)
	z.Write(data)
	z.Close()
	if got := len(members(t, Gzip, data, 2)); float64(got) > 1.02*float64(single.Len()) {
		t.Errorf("members take %d bytes, over 2%% more than one stream's %d", got, single.Len())
	}
}

// The layers of a zstd push are tar+zstd, in the cache apart from gzip's, and read back.
func TestZstdLayers(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "index.js"), text(10_000, 3), 0o644)
	cache := WithCacheDir(t.TempDir())
	gz, err := Sources(component(t, root, "one"), cache)
	if err != nil {
		t.Fatal(err)
	}
	zs, err := Sources(component(t, root, "one"), cache, WithCompression(Zstd))
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := zs.MediaType(); mt != "application/vnd.oci.image.layer.v1.tar+zstd" {
		t.Errorf("media type %s", mt)
	}
	if digest(t, gz) == digest(t, zs) {
		t.Error("the zstd layer is the gzip one")
	}
	gzDiff, _ := gz.DiffID()
	zsDiff, _ := zs.DiffID()
	if gzDiff != zsDiff {
		t.Errorf("the tar streams differ: %s, %s", gzDiff, zsDiff)
	}
	if e := entries(t, zs); find(e, "composition/dummies-one/index.js") == nil {
		t.Errorf("the zstd layer lacks index.js: %v", names(e))
	}
	if _, err := ParseCompression("brotli"); err == nil {
		t.Error("brotli is taken")
	}
}

// BenchmarkCompression reports MB/s of a layer's tar stream compressed as toa-push compresses it
// (members on every core), beside one gzip stream, and beside `gzip -6` and `pigz -6` when the
// machine has them: 64 MiB of text by default, or the first 64 MiB of $TOA_BENCH_TAR.
func BenchmarkCompression(b *testing.B) {
	data := text(64<<20, 4)
	if tar := os.Getenv("TOA_BENCH_TAR"); tar != "" {
		f, err := os.Open(tar)
		if err != nil {
			b.Fatal(err)
		}
		data, _ = io.ReadAll(io.LimitReader(f, 64<<20))
		f.Close()
	}
	ratio := func(b *testing.B, n int) { b.ReportMetric(float64(n)/float64(len(data)), "ratio") }
	b.Run("gzip-members", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		n := 0
		for b.Loop() {
			n = len(members(b, Gzip, data, runtime.NumCPU()))
		}
		ratio(b, n)
	})
	b.Run("zstd-members", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		n := 0
		for b.Loop() {
			n = len(members(b, Zstd, data, runtime.NumCPU()))
		}
		ratio(b, n)
	})
	b.Run("gzip-one-stream", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		n := 0
		for b.Loop() {
			var out bytes.Buffer
			z, _ := gzip.NewWriterLevel(&out, CompressionLevel)
			z.Write(data)
			z.Close()
			n = out.Len()
		}
		ratio(b, n)
	})
	for _, tool := range [][]string{{"gzip", "-6"}, {"pigz", "-6"}} {
		b.Run(tool[0]+tool[1], func(b *testing.B) {
			if _, err := exec.LookPath(tool[0]); err != nil {
				b.Skipf("no %s here", tool[0])
			}
			b.SetBytes(int64(len(data)))
			n := 0
			for b.Loop() {
				cmd := exec.Command(tool[0], tool[1:]...)
				cmd.Stdin = bytes.NewReader(data)
				var out bytes.Buffer
				cmd.Stdout = &out
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
				n = out.Len()
			}
			ratio(b, n)
		})
	}
}
