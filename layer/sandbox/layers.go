package sandbox

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
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

// openLayer opens the layer at of a base for the unpack, decompressed by klauspost/compress, which
// decompresses a 420 MB base in 1.5 s where compress/gzip (go-containerregistry's Uncompressed)
// takes 2.0 s on this project's 2-core runner, ahead of its reader (aheadReader). The unpack
// stops reading at the tar's end-of-archive, before the blob's end where its digest is checked
// (by the registry client and go-containerregistry): close(true) reads the rest, so that a
// registry that served other bytes under the digest fails the unpack, and checks the
// uncompressed bytes against at.diffID, what the base's config says of them (rootfs.diff_ids),
// so that a base whose layers are not those of its config fails it too.
func openLayer(l v1.Layer, at layerAt) (*layerReader, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	blob := bufio.NewReaderSize(&sticky{r: rc}, 256<<10)
	magic, _ := blob.Peek(4) // a shorter blob is no compressed stream: read as it is
	sum := sha256.New()
	r := &layerReader{Reader: io.TeeReader(blob, sum), blob: blob, rc: rc, layer: l, at: at, sum: sum}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(blob)
		if err != nil {
			rc.Close()
			return nil, err
		}
		// hashed in the decompression's goroutine, beside the writes of the files
		r.ahead, r.stop = readAhead(io.TeeReader(zr, sum)), func() { zr.Close() }
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(blob, zstd.WithDecoderConcurrency(1))
		if err != nil {
			rc.Close()
			return nil, err
		}
		r.ahead, r.stop = readAhead(io.TeeReader(zr, sum)), zr.Close
	}
	if r.ahead != nil {
		r.Reader = r.ahead
	}
	return r, nil
}

// layerAt is where a layer is in its base, and what the base's config says of its uncompressed
// bytes.
type layerAt struct {
	index, count int // from 1
	diffID       v1.Hash
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
	at    layerAt
	sum   hash.Hash // of the uncompressed bytes read
}

// close ends the reading of the layer. whole reads the rest of it first, uncompressed and then
// the rest of its blob, so that its uncompressed bytes are checked against its diff ID and its
// blob against its digest; a failed unpack does not wait for checks nobody reads.
func (r *layerReader) close(whole bool) error {
	var err error
	if whole {
		_, err = io.Copy(io.Discard, r.Reader) // the tar's padding after its end, into the sum
	}
	if r.ahead != nil {
		r.ahead.halt() // before the blob is read on: the decompression reads it too
	}
	if whole && err == nil {
		_, err = io.Copy(io.Discard, r.blob)
	}
	if r.stop != nil {
		r.stop()
	}
	if closeErr := r.rc.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("read %s to its end: %w", r.name(), err)
	}
	if !whole {
		return nil
	}
	if got := hex.EncodeToString(r.sum.Sum(nil)); r.at.diffID.Algorithm != "sha256" || got != r.at.diffID.Hex {
		return &LayerMismatch{Layer: r.name(), DiffID: r.at.diffID.String(), Got: "sha256:" + got}
	}
	return nil
}

// name names the layer in messages: its place in the base and its blob's digest.
func (r *layerReader) name() string {
	what := fmt.Sprintf("the layer %d of %d", r.at.index, r.at.count)
	if d, err := r.layer.Digest(); err == nil {
		what += " (" + d.String() + ")"
	}
	return what
}

// LayerMismatch is a base's layer whose uncompressed bytes are not what its config's
// rootfs.diff_ids says of them: the base's layers are not those its config was made with.
type LayerMismatch struct {
	Layer  string // which: "the layer 2 of 3 (sha256:...)"
	DiffID string // what the config says
	Got    string // what the layer holds
}

func (e *LayerMismatch) Error() string {
	return fmt.Sprintf("%s is %s uncompressed, where the base's config says %s (rootfs.diff_ids): "+
		"its layers are not those its config was made with (damaged, or forged to pass for another base), "+
		"and nothing of it is kept; build on a base whose publisher you trust, or push this one again from its source",
		e.Layer, e.Got, e.DiffID)
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

// baseLayers are img's layers, each with its place and what the config says of it. A base whose
// manifest lists another number of layers than its config's rootfs.diff_ids is refused: which
// layer is which would be a guess.
func baseLayers(img v1.Image) ([]v1.Layer, []layerAt, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("read the base's config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, nil, fmt.Errorf("read the base's layers: %w", err)
	}
	diffIDs := cfg.RootFS.DiffIDs
	if len(layers) != len(diffIDs) {
		return nil, nil, fmt.Errorf("its manifest lists %d layers where its config names %d (rootfs.diff_ids): "+
			"its layers are not those its config was made with (damaged, or forged to pass for another base), "+
			"and nothing of it is kept; build on a base whose publisher you trust, or push this one again from its source",
			len(layers), len(diffIDs))
	}
	at := make([]layerAt, len(layers))
	for i := range layers {
		at[i] = layerAt{index: i + 1, count: len(layers), diffID: diffIDs[i]}
	}
	return layers, at, nil
}

// ErrSkipRest, returned by the function EachLayer calls, ends the reading after the layer it was
// given, which is still read to its end and checked.
var ErrSkipRest = errors.New("skip the rest of the layers")

// EachLayer reads img's layers, the lowest first, each as a tar stream given to f with its
// index, and each to its end after f, its blob checked against its digest and its uncompressed
// bytes against the diff ID its config names (and the layers counted against them): what f
// found is to be believed, or cached, only when EachLayer returns nil. f returns ErrSkipRest to
// end the reading after that layer.
func EachLayer(ctx context.Context, img v1.Image, f func(i int, tr *tar.Reader) error) error {
	layers, at, err := baseLayers(img)
	if err != nil {
		return err
	}
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := openLayer(l, at[i])
		if err != nil {
			return fmt.Errorf("read the layer %d of %d: %w", i+1, len(layers), err)
		}
		err = f(i, tar.NewReader(r))
		skip := errors.Is(err, ErrSkipRest)
		if closeErr := r.close(err == nil || skip); err == nil || skip {
			err = closeErr
			if err == nil && skip {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
