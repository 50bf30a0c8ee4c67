package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// readWhole wraps an image for mutate.Extract so that each layer is read to its end and
// decompressed by klauspost/compress:
//
//   - Extract stops reading a layer at the tar's end-of-archive, before the blob's end, where its
//     digest is checked (by the registry client and go-containerregistry): a registry that served
//     other bytes under the digest would have them unpacked unchecked. Each layer's rest is read
//     when Extract closes it, and what that found is kept for Unpack, which says it before it
//     believes the root.
//   - klauspost/compress's gzip decompresses a 420 MB base in 1.5 s where compress/gzip (which
//     go-containerregistry's Uncompressed uses) takes 2.0 s, on this project's 2-core runner.
type readWhole struct {
	v1.Image
	mu   sync.Mutex
	errs []error
	// abandoned: the unpack failed or was cancelled; the layers still open are closed unread,
	// not read on for a check nobody waits for
	abandoned atomic.Bool
}

func (w *readWhole) Layers() ([]v1.Layer, error) {
	layers, err := w.Image.Layers()
	if err != nil {
		return nil, err
	}
	out := make([]v1.Layer, len(layers))
	for i, l := range layers {
		out[i] = &wholeLayer{Layer: l, image: w}
	}
	return out, nil
}

// err is the first failure found at the end of a layer, nil when every layer read was whole.
func (w *readWhole) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.errs...)
}

func (w *readWhole) keep(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
}

type wholeLayer struct {
	v1.Layer
	image *readWhole
}

// The magic numbers a layer's blob begins with (anything else is read as a plain tar, as
// go-containerregistry does).
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

func (l *wholeLayer) Uncompressed() (io.ReadCloser, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	blob := bufio.NewReaderSize(&sticky{r: rc}, 256<<10)
	magic, _ := blob.Peek(4) // a shorter blob is no compressed stream: read as it is
	r := &wholeReader{Reader: blob, blob: blob, rc: rc, layer: l}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(blob)
		if err != nil {
			rc.Close()
			return nil, err
		}
		r.Reader, r.stop = zr, func() { zr.Close() }
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(blob, zstd.WithDecoderConcurrency(1))
		if err != nil {
			rc.Close()
			return nil, err
		}
		r.Reader, r.stop = zr, zr.Close
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

// wholeReader is a layer decompressed; closing it reads the rest of the blob.
type wholeReader struct {
	io.Reader
	blob  *bufio.Reader
	rc    io.ReadCloser
	stop  func()
	layer *wholeLayer
}

func (r *wholeReader) Close() error {
	var err error
	if !r.layer.image.abandoned.Load() {
		_, err = io.Copy(io.Discard, r.blob)
	}
	if r.stop != nil {
		r.stop()
	}
	if closeErr := r.rc.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		what := "a layer"
		if d, derr := r.layer.Digest(); derr == nil {
			what = "the layer " + d.String()
		}
		err = fmt.Errorf("read %s to its end: %w", what, err)
		r.layer.image.keep(err)
	}
	return err
}
