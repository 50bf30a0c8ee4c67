package layer

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression is how layers are compressed: Gzip (the default, which every registry and runtime
// reads) or Zstd (tar+zstd, which containerd 1.5 and later, CRI-O and podman read).
type Compression string

const (
	Gzip Compression = "gzip"
	Zstd Compression = "zstd"
)

// ParseCompression reads --compression.
func ParseCompression(s string) (Compression, error) {
	switch c := Compression(s); c {
	case "", Gzip:
		return Gzip, nil
	case Zstd:
		return c, nil
	}
	return "", fmt.Errorf("compression '%s' is not gzip or zstd", s)
}

// WithCompression sets how layers are compressed. Default: Gzip. With Zstd, layers are
// tar+zstd (types.OCILayerZStd), kept in the cache apart from gzip's.
func WithCompression(c Compression) Option {
	return func(o *options) {
		o.compression = c
		if c == Zstd {
			o.mediaType = types.OCILayerZStd
		}
	}
}

// MemberSize is how much of a layer's tar stream one compressed member holds. A layer is
// compressed as independent members of MemberSize bytes each, in parallel on every core, and
// written one after the other: a gzip file of several members (RFC 1952 §2.2), a zstd stream of
// several frames, which every reader reads as one stream. The bytes depend only on the stream
// and MemberSize, never on the number of cores. A layer of MemberSize bytes or less is one
// member: the same bytes as a single gzip stream of CompressionLevel.
const MemberSize = 4 << 20

// zstdLevel is the level of zstd layers: klauspost/compress's default, about zstd -3.
const zstdLevel = zstd.SpeedDefault

// ext is the cache file's extension for the compression.
func (c Compression) ext() string {
	if c == Zstd {
		return ".tar.zst"
	}
	return ".tar.gz"
}

// compress compresses one member.
type compress func(dst *bytes.Buffer, src []byte) error

// gzipWriters keeps gzip writers for the members to come: each holds some 800 KiB of the
// compressor's tables, which a new one allocates and clears, and a push writes a layer for each
// composition's sources.
var gzipWriters = sync.Pool{New: func() any {
	z, _ := gzip.NewWriterLevel(nil, CompressionLevel) // CompressionLevel is a valid level
	return z
}}

func gzipMember(dst *bytes.Buffer, src []byte) error {
	z := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(z)
	z.Reset(dst)
	if _, err := z.Write(src); err != nil {
		return err
	}
	return z.Close()
}

var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	// EncodeAll of one member is the same bytes whatever the concurrency: each call is a frame
	return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstdLevel), zstd.WithEncoderConcurrency(1))
})

func zstdMember(dst *bytes.Buffer, src []byte) error {
	enc, err := zstdEncoder()
	if err != nil {
		return err
	}
	dst.Write(enc.EncodeAll(src, make([]byte, 0, len(src)/3)))
	return nil
}

// memberWriter compresses what it is written in members of MemberSize, up to jobs at once, and
// writes them in order to w.
type memberWriter struct {
	w        io.Writer
	compress compress
	buf      []byte
	pending  chan chan result // members in order, each answered when compressed
	sem      chan struct{}
	done     chan error // the writer's first error, when it stops
	closed   bool
}

type result struct {
	data *bytes.Buffer
	err  error
}

func newMemberWriter(w io.Writer, c Compression) *memberWriter {
	jobs := max(1, runtime.GOMAXPROCS(0))
	// buf grows as the first member fills: most layers (a code change's sources) are a few
	// kilobytes, and a buffer of MemberSize is 4 MiB to allocate and clear
	m := &memberWriter{w: w, compress: gzipMember,
		pending: make(chan chan result, jobs), sem: make(chan struct{}, jobs), done: make(chan error, 1)}
	if c == Zstd {
		m.compress = zstdMember
	}
	go m.drain()
	return m
}

// drain writes the members as they are compressed, in order.
func (m *memberWriter) drain() {
	var first error
	for r := range m.pending {
		res := <-r
		if first == nil {
			first = res.err
		}
		if first == nil {
			_, first = m.w.Write(res.data.Bytes())
		}
	}
	m.done <- first
}

// send compresses the buffer as a member, in its own goroutine.
func (m *memberWriter) send() {
	data := m.buf
	m.buf = nil
	if !m.closed { // a full member went: the next is likely full too
		m.buf = make([]byte, 0, MemberSize)
	}
	r := make(chan result, 1)
	m.sem <- struct{}{}
	m.pending <- r
	go func() {
		defer func() { <-m.sem }()
		var out bytes.Buffer
		err := m.compress(&out, data)
		r <- result{&out, err}
	}()
}

func (m *memberWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(m.buf) == MemberSize {
			m.send()
		}
		k := min(len(p), MemberSize-len(m.buf))
		m.buf = append(m.buf, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

// Close compresses what is left as the last member (an empty stream is one empty member) and
// waits until every member is written.
func (m *memberWriter) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	m.send()
	close(m.pending)
	return <-m.done
}

// decompress reads a layer of the compression.
func decompress(c Compression, r io.Reader) (io.ReadCloser, error) {
	if c == Zstd {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return gzip.NewReader(r)
}
