package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// faultRun is a base on one faulty registry and two images built on it (the base's index with a
// new layer on each of its images) that go to two repositories of another, as a push of two
// compositions does, so that faults can break the downloads of the base and the uploads of the
// images. Nothing of Toa is needed: the registry client is all that runs.
type faultRun struct {
	base, target *harness.Faulty
	baseRef      string

	mu      sync.Mutex
	notices []string
}

func newFaultRun(t *testing.T) *faultRun {
	f := &faultRun{base: harness.FaultyRegistry(t), target: harness.FaultyRegistry(t)}
	f.baseRef = harness.PushLayeredBase(t, f.base.Addr)
	return f
}

// push pushes the two images with the registry options given, and returns their references, how
// long it took and the error.
func (f *faultRun) push(t *testing.T, opts ...RegistryOption) ([]string, time.Duration, error) {
	t.Helper()
	notify := WithNotify(func(s string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.notices = append(f.notices, s)
	})
	reg, err := NewRegistries(append([]RegistryOption{notify}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	refs, err := pushWith(context.Background(), t, f.baseRef, f.target.Addr, reg, nil)
	return refs, time.Since(start), err
}

func (f *faultRun) said(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.notices {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// pushWith reads the base's index from its registry with reg, and writes two images built on it
// into target's repositories shop/front and shop/back, tagged last, as a push of two compositions
// does: the base's layers stream from one registry into the other, the new ones are sent once.
// top, when not nil, makes each image's new layer.
func pushWith(ctx context.Context, t *testing.T, base, target string, reg *Registries, top func() v1.Layer) ([]string, error) {
	t.Helper()
	ref, err := reg.Reference(base)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := reg.Index(ctx, ref)
	if err != nil {
		return nil, Wrap("the base "+base, "", err)
	}
	var refs []string
	for _, repo := range []string{"shop/front", "shop/back"} {
		built, err := builtOn(t, idx, top)
		if err != nil {
			return nil, Wrap("the base "+base, "to build "+repo, err)
		}
		out := fmt.Sprintf("%s/%s:t", target, repo)
		r, err := name.ParseReference(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.WriteIndex(ctx, r, built); err != nil {
			return refs, Wrap("push "+out, "", err)
		}
		refs = append(refs, out)
	}
	return refs, nil
}

// builtOn is idx with a new layer on each of its images.
func builtOn(t *testing.T, idx v1.ImageIndex, top func() v1.Layer) (v1.ImageIndex, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var adds []mutate.IndexAddendum
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		l := randomLayer(t)
		if top != nil {
			l = top()
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
	}
	return mutate.AppendManifests(mutate.RemoveManifests(idx, func(v1.Descriptor) bool { return true }), adds...), nil
}

func randomLayer(t *testing.T) v1.Layer {
	l, err := random.Layer(256<<10, "application/vnd.oci.image.layer.v1.tar+gzip")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// uploadedDigests are the digests of the blobs whose upload the registry completed.
func uploadedDigests(rec *harness.Recorder) []string {
	var out []string
	for _, r := range rec.BlobUploads() {
		q, _ := url.ParseQuery(r.Query)
		if d := q.Get("digest"); d != "" && r.Status == http.StatusCreated {
			out = append(out, d)
		}
	}
	return out
}

// TestFaults pushes through a proxy that cuts, stalls and refuses, in front of real registries:
// each fault either heals by a retry, or fails within a bound with the exit code of its class
// and words that say what happened; no tag is left on an image with missing blobs; and a rerun
// once the fault is gone finishes, sending only what the registry still lacks.
func TestFaults(t *testing.T) {
	quick := []RegistryOption{WithStallTimeout(time.Second), WithRetries(2), WithBackoff(50 * time.Millisecond)}
	cases := []struct {
		name    string
		on      func(f *faultRun) *harness.Faulty // which registry breaks
		fault   harness.Fault
		opts    []RegistryOption
		class   fault.Class // of the failure; -1 when the push heals
		words   string      // in the error, or in a retry notice when it heals
		within  time.Duration
		atLeast time.Duration
	}{
		{name: "a cut upload is sent again", on: onTarget,
			fault: harness.Fault{Match: harness.BlobUpload, Times: 1, Kind: harness.CutRequest, After: 1024},
			class: -1, words: "sending it again", within: 30 * time.Second},
		{name: "an upload cut every time fails saying the connection broke", on: onTarget,
			fault: harness.Fault{Match: harness.BlobUpload, Kind: harness.CutRequest, After: 1024},
			class: fault.ClassFailed, words: "mid-transfer", within: 30 * time.Second},
		{name: "an upload that stalls every time times out", on: onTarget,
			fault: harness.Fault{Match: harness.BlobUpload, Kind: harness.StallRequest, After: 1024},
			class: fault.ClassTimeout, words: "no byte moved for 1s", within: 20 * time.Second, atLeast: 3 * time.Second},
		{name: "a stalled download resumes", on: onBase,
			fault: harness.Fault{Match: harness.BlobDownload, Times: 1, Kind: harness.StallResponse, After: 4096},
			class: -1, words: "the download broke after 4096 bytes", within: 30 * time.Second, atLeast: time.Second},
		{name: "a download that stalls every time times out", on: onBase,
			fault: harness.Fault{Match: harness.BlobDownload, Kind: harness.StallResponse, After: 4096},
			class: fault.ClassTimeout, words: "no byte moved for 1s while receiving", within: 20 * time.Second, atLeast: 3 * time.Second},
		{name: "a cut download resumes", on: onBase,
			fault: harness.Fault{Match: harness.BlobDownload, Times: 1, Kind: harness.CutResponse, After: 4096},
			class: -1, words: "the download broke after 4096 bytes", within: 30 * time.Second},
		{name: "a download cut every time fails saying the connection broke", on: onBase,
			fault: harness.Fault{Match: harness.BlobDownload, Kind: harness.CutResponse, After: 4096},
			class: fault.ClassFailed, words: "mid-transfer", within: 30 * time.Second},
		{name: "503 answers are asked again", on: onTarget,
			fault: harness.Fault{Match: func(r *http.Request) bool { return harness.ManifestPut(r) || harness.UploadStart(r) }, Times: 3,
				Kind: harness.Answer, Status: http.StatusServiceUnavailable},
			class: -1, words: "503 Service Unavailable", within: 30 * time.Second},
		{name: "a 429 is asked again after its Retry-After", on: onTarget,
			fault: harness.Fault{Match: harness.UploadStart, Times: 1, Kind: harness.Answer, Status: http.StatusTooManyRequests, RetryAfter: "2"},
			class: -1, words: "retrying in 2s", within: 30 * time.Second, atLeast: 2 * time.Second},
		{name: "a 503 every time fails with the registry's words", on: onTarget,
			fault: harness.Fault{Match: harness.ManifestPut, Kind: harness.Answer, Status: http.StatusServiceUnavailable},
			class: fault.ClassFailed, words: "503 Service Unavailable", within: 30 * time.Second},
		{name: "a registry restarting mid-push is waited for", on: onTarget,
			fault: harness.Fault{Match: harness.BlobUpload, Times: 1, Kind: harness.Restart},
			opts:  []RegistryOption{WithRetries(5), WithBackoff(500 * time.Millisecond)},
			class: -1, words: "sending it again", within: 60 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFaultRun(t)
			broken := c.on(f)
			injected := broken.Inject(c.fault)
			f.target.Reset()
			res, took, err := f.push(t, append(append([]RegistryOption(nil), quick...), c.opts...)...)
			t.Logf("%s in %s: %v", c.name, took.Round(time.Millisecond), err)
			if injected.Hits() == 0 {
				t.Fatalf("the fault broke no request")
			}
			if took > c.within || took < c.atLeast {
				t.Errorf("took %s, want between %s and %s", took, c.atLeast, c.within)
			}
			switch {
			case c.class == -1 && err != nil:
				t.Fatalf("the push did not heal: %v", err)
			case c.class == -1:
				if !f.said(c.words) {
					t.Errorf("no retry notice says %q: %q", c.words, f.notices)
				}
				if len(res) != 2 {
					t.Errorf("not pushed: %v", res)
				}
			case err == nil:
				t.Fatalf("the push succeeded through the fault")
			default:
				t.Logf("retry notices: %q", f.notices)
				if got := fault.ClassOf(err); got != c.class {
					t.Errorf("class %d, want %d: %v", got, c.class, err)
				}
				if !strings.Contains(err.Error(), c.words) || strings.Contains(err.Error(), "cannot connect") {
					t.Errorf("the error does not say %q:\n%v", c.words, err)
				}
			}
			if err := harness.Complete(context.Background(), f.target.Addr); err != nil {
				t.Errorf("a tag points at an incomplete image: %v", err)
			}
			if c.class == -1 {
				return
			}
			// the rerun, the fault gone, finishes and sends only what is missing
			broken.Heal()
			had := f.target.Blobs()
			f.target.Reset()
			if _, _, err := f.push(t, quick...); err != nil {
				t.Fatalf("the rerun failed: %v", err)
			}
			for _, d := range uploadedDigests(f.target.Recorder) {
				if had[d] {
					t.Errorf("the rerun sent %s again, which the registry had", d)
				}
			}
			if err := harness.Complete(context.Background(), f.target.Addr); err != nil {
				t.Errorf("after the rerun: %v", err)
			}
		})
	}
}

func onTarget(f *faultRun) *harness.Faulty { return f.target }
func onBase(f *faultRun) *harness.Faulty   { return f.base }

// A push cut short by its context (toa-push's --timeout) leaves no tag and says it ran out of
// time.
func TestPushDeadline(t *testing.T) {
	f := newFaultRun(t)
	f.target.Inject(harness.Fault{Match: harness.BlobUpload, Kind: harness.StallRequest, After: 1024})
	reg, err := NewRegistries(WithStallTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err = pushWith(ctx, t, f.baseRef, f.target.Addr, reg, nil)
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("took %s after a 3s deadline", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || fault.ClassOf(err) != fault.ClassTimeout {
		t.Errorf("want a timeout, got %v", err)
	}
	if err := harness.Complete(context.Background(), f.target.Addr); err != nil {
		t.Errorf("a tag points at an incomplete image: %v", err)
	}
}

// damagedLayer is a cached layer whose file was damaged after it was written: its digest is what
// the cache recorded, its bytes are not.
type damagedLayer struct {
	v1.Layer
	path string
}

func (d damagedLayer) Compressed() (io.ReadCloser, error) { return os.Open(d.path) }
func (d damagedLayer) CachedFile() string                 { return d.path }

// damaged is a random layer kept as a damaged cache file in dir.
func damaged(t *testing.T, dir string) v1.Layer {
	l := randomLayer(t)
	h, _ := l.Digest()
	rc, _ := l.Compressed()
	data, _ := io.ReadAll(rc)
	data[len(data)/2] ^= 0xff
	path := filepath.Join(dir, h.Hex+".tar.gz")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return damagedLayer{Layer: l, path: path}
}

// A cached layer damaged on disk is not sent as it is: the push fails naming the file, which is
// removed so that the next run builds the layer anew, and no tag points at the image.
func TestDamagedCachedLayer(t *testing.T) {
	f := newFaultRun(t)
	reg, _ := NewRegistries()
	cache := t.TempDir()
	_, err := pushWith(context.Background(), t, f.baseRef, f.target.Addr, reg, func() v1.Layer { return damaged(t, cache) })
	if err == nil {
		t.Fatal("a damaged layer was pushed")
	}
	var corrupt *Error
	if !errors.As(err, &corrupt) || !strings.Contains(err.Error(), "the cached layer "+cache) ||
		!strings.Contains(err.Error(), "it was removed from the cache; run toa-push again") {
		t.Fatalf("the error does not name the cache file and what to do: %v", err)
	}
	if _, statErr := os.Stat(corrupt.File); !os.IsNotExist(statErr) {
		t.Errorf("%s is still in the cache", corrupt.File)
	}
	if fault.ClassOf(err) != fault.ClassFailed {
		t.Errorf("class %d", fault.ClassOf(err))
	}
	if err := harness.Complete(context.Background(), f.target.Addr); err != nil {
		t.Errorf("a tag points at an incomplete image: %v", err)
	}
}

// A registry that answers DIGEST_INVALID to bytes that match their digest (damaged on the way)
// is sent them again, and when it keeps answering so the error names the blob.
func TestRegistryAnswersDigestInvalid(t *testing.T) {
	f := newFaultRun(t)
	f.target.Inject(harness.Fault{Match: harness.BlobUpload, Kind: harness.Answer, Status: http.StatusBadRequest, Code: "DIGEST_INVALID"})
	_, _, err := f.push(t, WithRetries(1), WithBackoff(10*time.Millisecond))
	var corrupt *Error
	if !errors.As(err, &corrupt) || !strings.Contains(err.Error(), "(the registry answered DIGEST_INVALID)") {
		t.Fatalf("want the blob named with the registry's answer: %v", err)
	}
	if !f.said("sending it again") {
		t.Errorf("not sent again: %q", f.notices)
	}
}
