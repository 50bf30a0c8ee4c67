package registry

// What a registry sends is bounded and checked before anything is believed: a registry may be
// hostile or broken, and toa-push and toa-apply run on CI runners with a few GiB.
// go-containerregistry reads a manifest of up to 100 MiB, a config of whatever size its manifest
// declares (a 50 GB config with an endless body is out of memory in seconds), and replaces Go's
// limit of 10 redirects by a check of its own that has none (a blob redirecting to itself is
// 300,000 requests). Here:
//
//   - redirects of reads (GET, HEAD) are followed by the transport itself, at most 10, never from
//     HTTPS to plain HTTP without --insecure, never from a host to a private address of another
//     (as go-containerregistry's SSRF check), and the credentials go only to the host they were
//     given for;
//   - a manifest or an index is read up to MaxManifestSize, a config up to MaxConfigSize (refused
//     before reading when its manifest declares more);
//   - every blob read is checked against its digest at its end: a reader that stops early (the
//     libc scan) reads to the end before it believes anything.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The bounds on what is read from a registry.
const (
	MaxManifestSize = 4 << 20 // a manifest or an index: Distribution's own limit is 4 MiB
	MaxConfigSize   = 8 << 20 // an image's config: node's images have configs of a few KiB
	MaxRedirects    = 10      // as Go's http.Client, which go-containerregistry's check replaces
)

// boundedTransport follows the redirects of reads itself and bounds and checks what the registry
// sends (see the top of this file). It is below the authenticating transport, so that each hop
// it makes is its own to send or not to send the credentials with.
type boundedTransport struct {
	next     http.RoundTripper
	insecure bool
	program  string // who refuses, in its words; "" is toa-push
}

// reader names the command in the words of a refusal.
func (b *boundedTransport) reader() string {
	if b.program == "" {
		return "toa-push"
	}
	return b.program
}

func (b *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.follow(req)
	if err != nil {
		return nil, err
	}
	return bound(req, resp, b.reader())
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// follow sends req and follows the redirects of a GET or a HEAD. Other methods are answered as
// they are: the writer's client follows them with its own check (upload.go).
func (b *boundedTransport) follow(req *http.Request) (*http.Response, error) {
	first := req
	for hops := 0; ; hops++ {
		resp, err := b.next.RoundTrip(req)
		if err != nil || !isRedirect(resp.StatusCode) || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
			return resp, err
		}
		location := resp.Header.Get("Location")
		if location == "" {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		target, err := req.URL.Parse(location)
		what := fmt.Sprintf("%s answered %s %s with a redirect", first.URL.Host, first.Method, shortPath(first.URL.Path))
		switch {
		case err != nil || (target.Scheme != "http" && target.Scheme != "https"):
			return nil, requestError(first, Hostile, fmt.Sprintf("%s to %q, which is not an HTTP address", what, location), err)
		case hops >= MaxRedirects:
			return nil, requestError(first, Hostile, fmt.Sprintf("%s more than %d times (the last to %s): a redirect loop", what, MaxRedirects, cleanURL(target)), nil)
		case req.URL.Scheme == "https" && target.Scheme == "http" && !b.insecure:
			e := requestError(first, Hostile, fmt.Sprintf("%s from HTTPS to plain HTTP (%s)", what, cleanURL(target)), nil)
			e.Hint = b.reader() + " does not leave HTTPS for plain HTTP, where anyone on the way could read and change what is sent; pass --insecure to allow it"
			return nil, e
		case target.Hostname() != first.URL.Hostname() && privateHost(target.Hostname()):
			return nil, requestError(first, Hostile, fmt.Sprintf("%s to the private address %s of another host", what, target.Host), nil)
		}
		next := req.Clone(req.Context())
		next.URL, next.Host = target, ""
		if target.Host != first.URL.Host {
			// the credentials were given for the registry, not for where it sends us
			next.Header.Del("Authorization")
			next.Header.Del("Cookie")
		}
		req = next
	}
}

// bound limits a manifest's body and checks a blob's against its digest. A manifest that says
// it is bigger than the bound is refused before it is read.
func bound(req *http.Request, resp *http.Response, reader string) (*http.Response, error) {
	if req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	switch {
	case strings.Contains(req.URL.Path, "/manifests/"):
		tooBig := func(n string) error {
			return requestError(req, Hostile, fmt.Sprintf("the manifest %s from %s is %s, more than %s reads (%d MiB)",
				shortPath(req.URL.Path), req.URL.Host, n, reader, MaxManifestSize>>20), nil)
		}
		if resp.ContentLength > MaxManifestSize {
			resp.Body.Close()
			return nil, tooBig(fmt.Sprintf("%d bytes", resp.ContentLength))
		}
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxManifestSize, err: tooBig("longer")}
	case isBlobGet(req) && req.Header.Get("Range") == "":
		digest := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
		if !strings.HasPrefix(digest, "sha256:") {
			return resp, nil
		}
		resp.Body = &checkedBody{ReadCloser: resp.Body, req: req, digest: digest, h: sha256.New(), size: resp.ContentLength}
	}
	return resp, nil
}

// limitedBody fails with err once more than left bytes are read.
type limitedBody struct {
	io.ReadCloser
	left int64
	err  error
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, l.err
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.ReadCloser.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, l.err
	}
	return n, err
}

// checkedBody is a blob's body hashed as it is read; at its end, bytes that are not its digest
// are an error, never an EOF. The end is the Content-Length where there is one: a reader that
// reads exactly the size it expects (go-containerregistry's) never asks for the EOF.
type checkedBody struct {
	io.ReadCloser
	req    *http.Request
	digest string
	h      hash.Hash
	n      int64
	size   int64 // the Content-Length, -1 when there is none
}

func (c *checkedBody) Read(p []byte) (int, error) {
	if c.size >= 0 && int64(len(p)) > c.size-c.n+1 {
		p = p[:c.size-c.n+1] // never past the end, so that the end is seen
	}
	n, err := c.ReadCloser.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if c.size >= 0 && c.n >= c.size && err == nil {
		err = io.EOF
	}
	if err == io.EOF {
		if got := "sha256:" + hex.EncodeToString(c.h.Sum(nil)); got != c.digest {
			e := requestError(c.req, Corrupt, fmt.Sprintf("the blob %s from %s is not what its digest says (its %d bytes have the digest %s): the registry serves damaged or forged content",
				shortDigest(c.digest), c.req.URL.Host, c.n, got), nil)
			e.Digest, e.Got = c.digest, got
			return n, e
		}
	}
	return n, err
}

// bounded is an image of a registry whose config is read only when its manifest declares it
// within MaxConfigSize, and then read whole and checked against its digest.
type bounded struct {
	v1.Image
	what string // "127.0.0.1:5000/bases/node@sha256:…"

	once   sync.Once
	config []byte
	err    error
}

// boundedImage bounds the config reads of img, an image read from a registry as what.
func boundedImage(img v1.Image, what string) v1.Image {
	return &bounded{Image: img, what: what}
}

func (b *bounded) RawConfigFile() ([]byte, error) {
	b.once.Do(func() { b.config, b.err = b.readConfig() })
	return b.config, b.err
}

func (b *bounded) readConfig() ([]byte, error) {
	m, err := b.Image.Manifest()
	if err != nil {
		return nil, err
	}
	if m.Config.Size > MaxConfigSize || m.Config.Size < 0 {
		return nil, &Error{Kind: Hostile, Message: fmt.Sprintf("the manifest of %s declares a config of %d bytes, more than toa-push reads (%d MiB)",
			b.what, m.Config.Size, MaxConfigSize>>20)}
	}
	// go-containerregistry reads at most the declared size, through the checked body above
	return b.Image.RawConfigFile()
}

// Descriptor is the descriptor the image was listed with, where it has one (partial.Descriptor
// reads it for the platform and annotations of an index's entry).
func (b *bounded) Descriptor() (*v1.Descriptor, error) { return partial.Descriptor(b.Image) }

func (b *bounded) ConfigFile() (*v1.ConfigFile, error) {
	raw, err := b.RawConfigFile()
	if err != nil {
		return nil, err
	}
	return v1.ParseConfigFile(bytes.NewReader(raw))
}

func (b *bounded) ConfigName() (v1.Hash, error) {
	m, err := b.Image.Manifest()
	if err != nil {
		return v1.Hash{}, err
	}
	return m.Config.Digest, nil
}

func (b *bounded) ConfigLayer() (v1.Layer, error) {
	raw, err := b.RawConfigFile()
	if err != nil {
		return nil, err
	}
	return partial.ConfigLayer(&configOnly{raw: raw})
}

// configOnly is what partial.ConfigLayer needs of an image.
type configOnly struct{ raw []byte }

func (c *configOnly) RawConfigFile() ([]byte, error) { return c.raw, nil }

// boundedIndex is an index of a registry whose images are bounded.
type boundedIndex struct {
	idx  v1.ImageIndex
	what string
}

func (b *boundedIndex) MediaType() (types.MediaType, error)       { return b.idx.MediaType() }
func (b *boundedIndex) Digest() (v1.Hash, error)                  { return b.idx.Digest() }
func (b *boundedIndex) Size() (int64, error)                      { return b.idx.Size() }
func (b *boundedIndex) IndexManifest() (*v1.IndexManifest, error) { return b.idx.IndexManifest() }
func (b *boundedIndex) RawManifest() ([]byte, error)              { return b.idx.RawManifest() }

func (b *boundedIndex) Image(h v1.Hash) (v1.Image, error) {
	img, err := b.idx.Image(h)
	if err != nil {
		return nil, err
	}
	return boundedImage(img, b.what+"@"+h.String()), nil
}

func (b *boundedIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	idx, err := b.idx.ImageIndex(h)
	if err != nil {
		return nil, err
	}
	return &boundedIndex{idx: idx, what: b.what}, nil
}

// Bounded bounds the config of img, an image read from a registry (what names it): read only
// within MaxConfigSize, and checked against its digest. Its manifest and its blobs are bounded
// and checked by the transport they are read through. Registries.Image and Index return bounded
// images already; Bounded is for the image of a descriptor from Get.
func Bounded(img v1.Image, what string) v1.Image { return boundedImage(img, what) }

// ReadWhole reads a blob to its end, so that its digest is checked (checkedBody, and
// go-containerregistry's own check) before what was found in it is believed: a reader that
// stops at what it looks for (the libc scan) calls it before it answers.
func ReadWhole(rc io.Reader) error {
	_, err := io.Copy(io.Discard, rc)
	return err
}
