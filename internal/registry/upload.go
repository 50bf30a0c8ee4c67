package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// The writing half of a registry (go-containerregistry's remote.WriteIndex does it otherwise:
// it asks with a HEAD for every blob and every child manifest, mounts only the layers it read
// from the same registry, and retries a blob with its own fixed backoff). Here a blob this run
// knows the repository holds is not asked for; one another repository of the registry holds is
// mounted from there; one that is being sent to another repository is waited for and then
// mounted; anything else is asked for once and sent, retried whole when its transfer breaks.
// Child manifests are written by digest without asking, and the tag last.

// WriteIndex puts idx and everything it holds into ref's repository, the tag last. What this run
// wrote by digest already (the index by its digest, before its tag) is not written again.
func (r *Registries) WriteIndex(ctx context.Context, ref name.Reference, idx v1.ImageIndex) error {
	c, err := r.client(ctx, ref.Context())
	if err != nil {
		return err
	}
	w := &writer{r: r, c: c, repo: ref.Context()}
	ctx = withCounter(ctx, r.counter)
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if !w.wrote(digest) {
		if err := w.children(ctx, idx); err != nil {
			return err
		}
	}
	if _, byDigest := ref.(name.Digest); byDigest {
		return w.manifestOnce(ctx, digest, idx)
	}
	return w.manifest(ctx, ref.Identifier(), idx)
}

// WriteChildren puts what idx holds (its images and indexes, with their blobs) into repo by
// their digests, but not idx itself: WriteIndex then writes only idx, under its tag.
func (r *Registries) WriteChildren(ctx context.Context, repo name.Repository, idx v1.ImageIndex) error {
	c, err := r.client(ctx, repo)
	if err != nil {
		return err
	}
	w := &writer{r: r, c: c, repo: repo}
	return w.children(withCounter(ctx, r.counter), idx)
}

// wrote says whether this run put the manifest of digest into the repository.
func (w *writer) wrote(digest v1.Hash) bool {
	_, ok := w.c.written.Load(w.repo.RepositoryStr() + "@" + digest.String())
	return ok
}

// manifestOnce puts a manifest by its digest unless this run did.
func (w *writer) manifestOnce(ctx context.Context, digest v1.Hash, m manifestOf) error {
	if w.wrote(digest) {
		return nil
	}
	if err := w.manifest(ctx, digest.String(), m); err != nil {
		return err
	}
	w.c.written.Store(w.repo.RepositoryStr()+"@"+digest.String(), true)
	return nil
}

// writer writes into one repository of one registry.
type writer struct {
	r    *Registries
	c    *client
	repo name.Repository
}

// manifestOf is what a manifest PUT needs of an image or an index.
type manifestOf interface {
	RawManifest() ([]byte, error)
	MediaType() (types.MediaType, error)
}

// children writes every image and index the index holds, with their blobs, each manifest by its
// digest.
func (w *writer) children(ctx context.Context, idx v1.ImageIndex) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, d := range m.Manifests {
		switch {
		case w.wrote(d.Digest):
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err != nil {
				return err
			}
			g.Go(func() error { return w.image(ctx, img) })
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			g.Go(func() error {
				if w.wrote(d.Digest) {
					return nil
				}
				if err := w.children(ctx, child); err != nil {
					return err
				}
				return w.manifestOnce(ctx, d.Digest, child)
			})
		default:
			return fmt.Errorf("the index holds a %s, which toa-push does not write", d.MediaType)
		}
	}
	return g.Wait()
}

// image writes an image's layers and config, then its manifest by digest.
func (w *writer) image(ctx context.Context, img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	config, err := partial.ConfigLayer(img)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, l := range append(layers, config) {
		g.Go(func() error { return w.blob(gctx, l) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	return w.manifestOnce(ctx, digest, img)
}

// manifest PUTs a manifest or an index under a digest or a tag. Its body is bytes, so the
// transport retries it.
func (w *writer) manifest(ctx context.Context, identifier string, m manifestOf) error {
	_, err := w.putManifest(ctx, identifier, m)
	return err
}

// putManifest is manifest, returning the registry's answer's header.
func (w *writer) putManifest(ctx context.Context, identifier string, m manifestOf) (http.Header, error) {
	raw, err := m.RawManifest()
	if err != nil {
		return nil, err
	}
	mt, err := m.MediaType()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.url("/manifests/"+identifier), bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", string(mt))
	resp, err := w.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return resp.Header, w.check(resp, http.StatusCreated, http.StatusOK, http.StatusAccepted)
}

// WriteReferrers puts images whose manifests all name one subject (what is attached to it) into
// repo by their digests, their blobs as the images' are (one this run knows the repository
// holds is not asked for: a document shared by many images is sent once), then, where the
// registry has no referrers API (its answer to the PUTs names no OCI-Subject), adds them all to
// the subject's referrers tag, sha256-<hex>, with one read (made while they are written) and one
// write. go-containerregistry's
// remote.Write, called once per referrer, asked for the manifest and every blob first, and for
// the referrers API and the tag again for each.
func (r *Registries) WriteReferrers(ctx context.Context, repo name.Repository, imgs []v1.Image) error {
	if len(imgs) == 0 {
		return nil
	}
	c, err := r.client(ctx, repo)
	if err != nil {
		return err
	}
	w := &writer{r: r, c: c, repo: repo}
	ctx = withCounter(ctx, r.counter)
	descs := make([]v1.Descriptor, len(imgs))
	indexed := make([]bool, len(imgs))
	var subject v1.Hash
	for i, img := range imgs {
		m, err := img.Manifest()
		if err != nil {
			return err
		}
		if m.Subject == nil || (i > 0 && m.Subject.Digest != subject) {
			return fmt.Errorf("the referrers to write do not all name one subject")
		}
		subject = m.Subject.Digest
		d, err := partial.Descriptor(img)
		if err != nil {
			return err
		}
		descs[i] = *d
		descs[i].ArtifactType, descs[i].Annotations = m.ArtifactType, m.Annotations
		if descs[i].ArtifactType == "" {
			descs[i].ArtifactType = string(m.Config.MediaType)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	// the referrers tag is read while the referrers are written, unless the registry said it
	// indexes them itself: one round trip less where it does not
	var tag *tagRead
	if c.referrersAPI.Load() != referrersIndexed {
		tag = &tagRead{done: make(chan struct{})}
		go func() {
			defer close(tag.done)
			tag.index, tag.err = w.readReferrersTag(ctx, subject) // not gctx: Wait cancels it
		}()
	}
	for i, img := range imgs {
		g.Go(func() error {
			var err error
			indexed[i], err = w.referrer(gctx, img)
			return err
		})
	}
	err = g.Wait()
	if tag != nil {
		<-tag.done
	}
	if err != nil {
		return err
	}
	var tagged []v1.Descriptor
	for i, d := range descs {
		if !indexed[i] {
			tagged = append(tagged, d)
		}
	}
	if len(tagged) == 0 {
		c.referrersAPI.Store(referrersIndexed)
		return nil
	}
	c.referrersAPI.Store(referrersTagged)
	if tag == nil {
		tag = &tagRead{}
		tag.index, tag.err = w.readReferrersTag(ctx, subject)
	}
	if tag.err != nil {
		return tag.err
	}
	return w.writeReferrersTag(ctx, subject, tag.index, tagged)
}

// What a registry was seen to do with referrers (client.referrersAPI).
const (
	referrersUnknown int32 = iota
	referrersIndexed       // it answered a referrer's PUT with OCI-Subject: it has the referrers API
	referrersTagged        // it did not: the referrers tag schema
)

// tagRead is a read of a referrers tag under way.
type tagRead struct {
	done  chan struct{}
	index v1.IndexManifest
	err   error
}

// referrer writes one referrer's blobs and its manifest by digest, and says whether the
// registry indexed it as a referrer of its subject (OCI distribution 1.1's OCI-Subject header).
func (w *writer) referrer(ctx context.Context, img v1.Image) (bool, error) {
	layers, err := img.Layers()
	if err != nil {
		return false, err
	}
	config, err := partial.ConfigLayer(img)
	if err != nil {
		return false, err
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, l := range append(layers, config) {
		g.Go(func() error { return w.blob(gctx, l) })
	}
	if err := g.Wait(); err != nil {
		return false, err
	}
	digest, err := img.Digest()
	if err != nil {
		return false, err
	}
	h, err := w.putManifest(ctx, digest.String(), img)
	if err != nil {
		return false, err
	}
	return h.Get("OCI-Subject") != "", nil
}

// readReferrersTag reads the subject's referrers tag (OCI distribution 1.1, "Referrers Tag
// Schema"): an empty index where there is none.
func (w *writer) readReferrersTag(ctx context.Context, subject v1.Hash) (v1.IndexManifest, error) {
	tag := w.repo.Tag(subject.Algorithm + "-" + subject.Hex)
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	existing, err := w.r.Index(ctx, tag)
	var terr *transport.Error
	switch {
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return index, nil
	case err != nil:
		return index, fmt.Errorf("read the referrers tag %s: %w", tag, err)
	}
	m, err := existing.IndexManifest()
	if err != nil {
		return index, fmt.Errorf("read the referrers tag %s: %w", tag, err)
	}
	index.Manifests = m.Manifests
	return index, nil
}

// writeReferrersTag adds descriptors to the subject's referrers tag as read, keeping those it
// lists already.
func (w *writer) writeReferrersTag(ctx context.Context, subject v1.Hash, index v1.IndexManifest, add []v1.Descriptor) error {
	had := map[v1.Hash]bool{}
	for _, d := range index.Manifests {
		had[d.Digest] = true
	}
	for _, d := range add {
		if !had[d.Digest] {
			index.Manifests = append(index.Manifests, d)
		}
	}
	raw, err := json.Marshal(index)
	if err != nil {
		return err
	}
	return w.manifest(ctx, subject.Algorithm+"-"+subject.Hex, rawManifest{raw: raw, mediaType: types.OCIImageIndex})
}

// rawManifest is a manifest or index as bytes.
type rawManifest struct {
	raw       []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }

func (w *writer) url(path string) string {
	return (&url.URL{Scheme: w.c.scheme, Host: w.c.host, Path: "/v2/" + w.repo.RepositoryStr() + path}).String()
}

func (w *writer) do(req *http.Request) (*http.Response, error) {
	return (&http.Client{Transport: w.c.transport, CheckRedirect: sameHostRedirects}).Do(req)
}

// check turns an answer other than want into an error with the registry's words, its
// Retry-After, and whose credentials it refused.
func (w *writer) check(resp *http.Response, want ...int) error {
	err := transport.CheckError(resp, want...)
	if err == nil {
		return nil
	}
	if after := retryAfter(resp.Header); after > 0 {
		err = withRequest(&Error{Kind: Answered, RetryAfter: after, Err: err}, err)
	}
	return w.c.explain(err)
}

// sameHostRedirects follows redirects, but not to a private or loopback address of another host:
// a registry must not send what it is given to a service inside our network.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if from := via[0].URL.Hostname(); req.URL.Hostname() != from && privateHost(req.URL.Hostname()) {
		return fmt.Errorf("refused a redirect from %s to the private address %s", from, req.URL.Host)
	}
	return nil
}

func privateHost(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified())
}

// blob makes sure the repository holds l: known, mounted, or sent once in this run.
func (w *writer) blob(ctx context.Context, l v1.Layer) error {
	mt, err := l.MediaType()
	if err != nil {
		return err
	}
	if !mt.IsDistributable() {
		return nil // a foreign layer: the registry is not meant to hold it
	}
	h, err := l.Digest()
	if err != nil {
		return err
	}
	digest, repo := h.String(), w.repo.RepositoryStr()
	if ml, ok := l.(*remote.MountableLayer); ok && ml.Reference.Context().RegistryStr() == w.c.host {
		// read from a manifest of this registry: the repository it was read from holds it
		w.c.blobs.add(digest, ml.Reference.Context().RepositoryStr(), false)
	}
	for {
		if w.c.blobs.has(digest, repo) {
			return nil
		}
		// one transfer of a blob into a repository at a time: the platforms of an image share
		// layers, and a registry does not like two mounts of one blob into one repository at once
		f, owner := w.c.blobs.takeOff(repo + "@" + digest)
		if !owner {
			if err := f.wait(ctx); err != nil {
				return err
			}
			continue
		}
		err := w.place(ctx, l, digest)
		w.c.blobs.land(repo+"@"+digest, f, err)
		return err
	}
}

// place mounts the blob from a repository of the registry that holds it, or sends it once: while
// one repository receives it, the others wait and then mount it from there.
func (w *writer) place(ctx context.Context, l v1.Layer, digest string) error {
	repo := w.repo.RepositoryStr()
	for {
		if from, certain := w.c.blobs.source(digest, repo); from != "" && certain && !w.c.noMount.Load() {
			return w.transfer(ctx, l, digest, from)
		}
		f, owner := w.c.blobs.takeOff(digest)
		if !owner {
			if err := f.wait(ctx); err != nil {
				return err // the run fails with it: trying again here would only take longer
			}
			if w.c.blobs.has(digest, repo) {
				return nil
			}
			continue // it is in another repository now: mount it from there
		}
		from, _ := w.c.blobs.source(digest, repo) // remembered from an earlier run, or nothing
		err := w.transfer(ctx, l, digest, from)
		w.c.blobs.land(digest, f, err)
		return err
	}
}

// transfer mounts the blob from another repository, or sends it, retrying the whole transfer
// when a connection breaks or stalls or the registry answers 5xx or 429.
func (w *writer) transfer(ctx context.Context, l v1.Layer, digest, from string) error {
	size, err := l.Size()
	if err != nil {
		return err
	}
	policy := w.r.policy
	for attempt := 0; ; attempt++ {
		err := w.once(ctx, l, digest, size, from, attempt == 0)
		if err == nil {
			return nil
		}
		after, ok := w.retry(err)
		if !ok || attempt >= policy.retries || ctx.Err() != nil {
			return w.final(l, digest, err)
		}
		if after > maxRetryAfter {
			var terr *transport.Error
			status := 0
			if errors.As(err, &terr) {
				status = terr.StatusCode
			}
			return later(w.c.host, status, after)
		}
		d := policy.delay(attempt, after)
		if policy.notify != nil {
			policy.notify(fmt.Sprintf("the blob %s for %s: %s; sending it again in %s (retry %d of %d)", shortDigest(digest),
				w.repo, Reason(err), d.Round(10*time.Millisecond), attempt+1, policy.retries))
		}
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

// retry says whether a failed transfer is worth another try, and how long the registry asked to
// wait.
func (w *writer) retry(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.Kind == Corrupt && e.Got != "" {
		return 0, false // the bytes we have are wrong: sending them again will not help
	}
	after := time.Duration(0)
	if errors.As(err, &e) {
		after = e.RetryAfter
	}
	var terr *transport.Error
	switch {
	case errors.As(err, &terr):
		return after, retryStatus(terr.StatusCode) || isDigestInvalid(terr)
	case isRefused(err):
		return 0, w.c.reached.Load()
	}
	return 0, retryable(err)
}

// final is the error a transfer ends with: a registry that kept answering DIGEST_INVALID names
// the blob, and the cache file it came from.
func (w *writer) final(l v1.Layer, digest string, err error) error {
	var terr *transport.Error
	if !errors.As(err, &terr) || !isDigestInvalid(terr) {
		return err
	}
	e := withRequest(&Error{Kind: Corrupt, Digest: digest, Err: err}, err)
	if f, ok := l.(cachedFile); ok {
		e.File = f.CachedFile()
	}
	return e
}

func isDigestInvalid(e *transport.Error) bool {
	for _, d := range e.Errors {
		if d.Code == transport.DigestInvalidErrorCode {
			return true
		}
	}
	return false
}

func shortDigest(d string) string {
	if len(d) > 7+12 {
		return d[:7+12]
	}
	return d
}

// once is one try: mount from another repository where there is one, else ask whether the
// repository has the blob (first try only, and not for a Fresh blob) and send it.
func (w *writer) once(ctx context.Context, l v1.Layer, digest string, size int64, from string, first bool) error {
	if from == "" && first && !isFresh(l) {
		has, err := w.head(ctx, digest)
		if err != nil {
			return err
		}
		if has {
			w.c.blobs.add(digest, w.repo.RepositoryStr(), false)
			return nil
		}
	}
	location, mounted, err := w.start(ctx, digest, from)
	if err != nil {
		return err
	}
	if !mounted {
		if err := w.put(ctx, l, digest, size, location); err != nil {
			return err
		}
	}
	w.c.blobs.add(digest, w.repo.RepositoryStr(), true)
	return nil
}

// head asks whether the repository holds the blob.
func (w *writer) head(ctx context.Context, digest string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, w.url("/blobs/"+digest), nil)
	if err != nil {
		return false, err
	}
	resp, err := w.do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if err := w.check(resp, http.StatusOK, http.StatusNotFound); err != nil {
		return false, err
	}
	return resp.StatusCode == http.StatusOK, nil
}

// start opens an upload, asking the registry to mount the blob from another repository when
// from is set: 201 is done, 202 is an upload to make. A registry that answers a mount of a blob
// this run saw there with an upload does not mount: it is not asked again.
func (w *writer) start(ctx context.Context, digest, from string) (location string, mounted bool, err error) {
	q := url.Values{}
	if from != "" && !w.c.noMount.Load() {
		q.Set("mount", digest)
		q.Set("from", from)
	}
	u := w.url("/blobs/uploads/")
	if len(q) > 0 {
		u += "?" + q.Encode()
		if !w.c.mountSeen.Load() { // the first mount alone: if the registry does not mount, it is asked once
			w.c.mountTry.Lock()
			defer w.c.mountTry.Unlock()
			if w.c.noMount.Load() {
				return w.start(ctx, digest, "")
			}
			defer w.c.mountSeen.Store(true)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", false, err
	}
	resp, err := w.do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	if err := w.check(resp, http.StatusCreated, http.StatusAccepted); err != nil {
		if len(q) > 0 && !isTransient(err) {
			w.refuseMounts(digest, from)
			return w.start(ctx, digest, "")
		}
		return "", false, err
	}
	if resp.StatusCode == http.StatusCreated && len(q) > 0 {
		return "", true, nil
	}
	if len(q) > 0 {
		w.refuseMounts(digest, from)
	}
	loc, err := nextLocation(resp)
	return loc, false, err
}

// refuseMounts records that a mount of digest from from was not made: the registry does not
// mount when this run saw the blob there; an earlier run's memory was wrong otherwise.
func (w *writer) refuseMounts(digest, from string) {
	if w.c.blobs.has(digest, from) {
		w.c.noMount.Store(true)
		if w.r.policy.notify != nil {
			w.r.policy.notify(fmt.Sprintf("%s does not mount blobs from one repository into another: they are sent instead", w.c.host))
		}
		return
	}
	w.c.blobs.forget(digest)
}

func isTransient(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return retryStatus(terr.StatusCode)
	}
	return true // a broken connection, not an answer
}

// nextLocation resolves the Location of an upload against the request that got it.
func nextLocation(resp *http.Response) (string, error) {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return "", errors.New("the registry opened an upload without a Location")
	}
	u, err := url.Parse(loc)
	if err != nil {
		return "", fmt.Errorf("the registry's upload Location %q: %w", loc, err)
	}
	resolved := resp.Request.URL.ResolveReference(u)
	if from := resp.Request.URL.Hostname(); resolved.Hostname() != from && privateHost(resolved.Hostname()) {
		return "", fmt.Errorf("refused an upload Location on the private address %s", resolved.Host)
	}
	return resolved.String(), nil
}

// put sends the blob in one PUT to the upload's location, hashing what it reads: bytes that
// do not match the digest are not the registry's fault.
func (w *writer) put(ctx context.Context, l v1.Layer, digest string, size int64, location string) error {
	u, err := url.Parse(location)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("digest", digest)
	u.RawQuery = q.Encode()
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("read the blob %s: %w", shortDigest(digest), err)
	}
	body := &hashingBody{ReadCloser: rc, h: sha256.New()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), body)
	if err != nil {
		rc.Close()
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := w.do(req)
	if bad := body.mismatch(digest, size); bad != "" {
		if resp != nil {
			resp.Body.Close()
		}
		return corrupt(l, digest, bad)
	}
	if err != nil {
		return fmt.Errorf("send the blob %s (%d bytes): %w", shortDigest(digest), size, err)
	}
	defer resp.Body.Close()
	return w.check(resp, http.StatusCreated, http.StatusNoContent, http.StatusAccepted)
}

// hashingBody hashes a blob as it is sent.
type hashingBody struct {
	io.ReadCloser
	h    hash.Hash
	n    int64
	eof  bool
	rerr error
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.rerr = err
	}
	return n, err
}

// mismatch returns the digest of what was read when all of it was read and it is not digest.
func (b *hashingBody) mismatch(digest string, size int64) string {
	if !b.eof {
		return "" // not all read: the transfer broke first
	}
	got := "sha256:" + hex.EncodeToString(b.h.Sum(nil))
	if b.n == size && got == digest {
		return ""
	}
	return got
}

// Fresh marks a blob that this run made and that names what this run made (a document that
// names a new image's digest): no registry holds it unless an earlier run pushed that very image,
// so it is sent without asking first. The question would cost a round trip on the path of every
// push that writes it (POST and PUT instead of HEAD, POST and PUT), the answer a few bytes sent
// again after a failed run.
func Fresh(l v1.Layer) v1.Layer { return freshLayer{l} }

type freshLayer struct{ v1.Layer }

func isFresh(l v1.Layer) bool {
	_, ok := l.(freshLayer)
	return ok
}

// cachedFile is a layer kept in a file of toa-push's cache (the layer package's layers).
type cachedFile interface{ CachedFile() string }

// corrupt is the error for a blob whose bytes are not its digest; a cached file is removed, so
// that the next run builds it anew.
func corrupt(l v1.Layer, digest, got string) error {
	e := &Error{Kind: Corrupt, Digest: digest, Got: got}
	if f, ok := l.(cachedFile); ok && f.CachedFile() != "" {
		e.File = f.CachedFile()
		e.Evicted = os.Remove(e.File) == nil
	}
	return e
}
