package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// The magic numbers a layer's blob begins with (anything else is read as a plain tar, as
// go-containerregistry does).
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// openLayer opens a layer of a base for the unpack, decompressed by klauspost/compress, which
// decompresses a 420 MB base in 1.5 s where compress/gzip (go-containerregistry's Uncompressed)
// takes 2.0 s on this project's 2-core runner, ahead of its reader (aheadReader). The unpack
// stops reading at the tar's end-of-archive, before the blob's end where its digest is checked
// (by the registry client and go-containerregistry): close(true) reads the rest, so that a
// registry that served other bytes under the digest fails the unpack.
func openLayer(l v1.Layer) (*layerReader, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	blob := bufio.NewReaderSize(&sticky{r: rc}, 256<<10)
	magic, _ := blob.Peek(4) // a shorter blob is no compressed stream: read as it is
	r := &layerReader{Reader: blob, blob: blob, rc: rc, layer: l}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(blob)
		if err != nil {
			rc.Close()
			return nil, err
		}
		r.ahead, r.stop = readAhead(zr), func() { zr.Close() }
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(blob, zstd.WithDecoderConcurrency(1))
		if err != nil {
			rc.Close()
			return nil, err
		}
		r.ahead, r.stop = readAhead(zr), zr.Close
	}
	if r.ahead != nil {
		r.Reader = r.ahead
	}
	return r, nil
}

// sticky keeps the first error of a blob other than its end: the registry client says a forged
// blob on the read that brings its last bytes, which io.ReadFull (the tar reader's) drops when
// those bytes fill its buffer; the reads after it would see only the end.
type sticky struct {
	r   io.Reader
	err error
}

func (s *sticky) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// layerReader is a layer of a base, decompressed.
type layerReader struct {
	io.Reader
	blob  *bufio.Reader
	rc    io.ReadCloser
	ahead *aheadReader // the decompression, ahead of the reader
	stop  func()       // closes the decompressor
	layer v1.Layer
}

// close ends the reading of the layer. whole reads the rest of its blob first, so that it is
// checked against its digest; a failed unpack does not wait for a check nobody reads.
func (r *layerReader) close(whole bool) error {
	if r.ahead != nil {
		r.ahead.halt() // before the blob is read on: the decompression reads it too
	}
	var err error
	if whole {
		_, err = io.Copy(io.Discard, r.blob)
	}
	if r.stop != nil {
		r.stop()
	}
	if closeErr := r.rc.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		return nil
	}
	what := "a layer"
	if d, derr := r.layer.Digest(); derr == nil {
		what = "the layer " + d.String()
	}
	return fmt.Errorf("read %s to its end: %w", what, err)
}

// aheadBlock and aheadBlocks: how far the decompression runs ahead of the files being written.
const (
	aheadBlock  = 1 << 20
	aheadBlocks = 4
)

// aheadReader decompresses a layer in a goroutine of its own, up to aheadBlocks blocks ahead of
// its reader, so that the decompression (half of an unpack's processor time) and the writes
// of the files run on two cores.
type aheadReader struct {
	full chan []byte // decompressed blocks, in order; closed after the last, err set
	free chan []byte
	quit chan struct{}
	done chan struct{}
	err  error  // the decompressor's, other than its end
	cur  []byte // what is left to read of last
	last []byte
}

func readAhead(r io.Reader) *aheadReader {
	a := &aheadReader{full: make(chan []byte, aheadBlocks), free: make(chan []byte, aheadBlocks+2),
		quit: make(chan struct{}), done: make(chan struct{})}
	go a.run(r)
	return a
}

func (a *aheadReader) run(r io.Reader) {
	defer close(a.done)
	defer close(a.full)
	for {
		var buf []byte
		select {
		case buf = <-a.free:
		default:
			buf = make([]byte, aheadBlock)
		}
		n, err := fill(r, buf[:aheadBlock])
		if n > 0 {
			select {
			case a.full <- buf[:n]:
			case <-a.quit:
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				a.err = err
			}
			return
		}
	}
}

// fill reads into buf until it is full or r fails, keeping r's error as it is (io.ReadFull
// turns an end after some bytes into io.ErrUnexpectedEOF, which a decompressor also says of a
// cut stream).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (a *aheadReader) Read(p []byte) (int, error) {
	for len(a.cur) == 0 {
		if a.last != nil { // read whole: the decompression may fill it again
			select {
			case a.free <- a.last[:cap(a.last)]:
			default:
			}
			a.last = nil
		}
		buf, ok := <-a.full
		if !ok {
			if a.err != nil {
				return 0, a.err
			}
			return 0, io.EOF
		}
		a.cur, a.last = buf, buf
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
}

// halt stops the decompression and waits for it: nothing reads the blob after it returns.
func (a *aheadReader) halt() {
	select {
	case <-a.quit:
	default:
		close(a.quit)
	}
	<-a.done
}
