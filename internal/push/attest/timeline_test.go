package attest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/attest"
)

// timedRequest is one request through a roundProxy: when it came, its round, and when its
// answer was sent.
type timedRequest struct {
	method, path        string
	start, release, end time.Time
	round               int
}

// roundProxy stands in front of a registry and lets requests through in rounds, as a registry
// across a network would answer them a round trip late: each waits for the next tick (every
// period) and is then passed on, so that requests sent together go in one round, and a request
// sent once another was answered goes in a later one, however long the registry and the client
// took within the period. A round is then a round trip, whatever the machine's load, as long as
// the registry answers and the client sends what follows within the period.
type roundProxy struct {
	period   time.Duration
	mu       sync.Mutex
	origin   time.Time // the ticks' start
	requests []timedRequest
}

// newRoundProxy starts a roundProxy in front of the registry at backend and returns its
// address.
func newRoundProxy(t *testing.T, backend string, period time.Duration) (string, *roundProxy) {
	t.Helper()
	p := &roundProxy{period: period, origin: time.Now()}
	target := &url.URL{Scheme: "http", Host: backend}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // Distribution writes it into its upload Locations
	}}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		p.mu.Lock()
		round := int(start.Sub(p.origin)/p.period) + 1
		release := p.origin.Add(time.Duration(round) * p.period)
		p.mu.Unlock()
		time.Sleep(time.Until(release))
		proxy.ServeHTTP(w, r)
		p.mu.Lock()
		p.requests = append(p.requests, timedRequest{method: r.Method, path: r.URL.Path, start: start, release: release,
			end: time.Now(), round: round})
		p.mu.Unlock()
	}))
	t.Cleanup(server.Close)
	return strings.TrimPrefix(server.URL, "http://"), p
}

func (p *roundProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = nil
}

// timeline is the requests recorded since the last reset, in the order they came, their rounds
// counted from the first one's.
func (p *roundProxy) timeline() []timedRequest {
	p.mu.Lock()
	out := append([]timedRequest(nil), p.requests...)
	p.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	for i := len(out) - 1; i >= 0; i-- {
		out[i].round -= out[0].round - 1
	}
	return out
}

// rounds is how many rounds the timeline took, the first to the last.
func rounds(tl []timedRequest) int {
	n := 0
	for _, r := range tl {
		n = max(n, r.round)
	}
	return n
}

// overrun are the requests the registry answered late in their round (past three quarters of
// it): what the client sent next may have gone a round late, and the rounds counted may be more
// than the round trips made.
func (p *roundProxy) overrun(tl []timedRequest) []timedRequest {
	var out []timedRequest
	for _, r := range tl {
		if r.end.Sub(r.release) > p.period*3/4 {
			out = append(out, r)
		}
	}
	return out
}

func (r timedRequest) String(origin time.Time) string {
	return fmt.Sprintf("%2d %6.0f ms %6.0f ms  %-4s %s", r.round, float64(r.start.Sub(origin).Microseconds())/1000,
		float64(r.end.Sub(origin).Microseconds())/1000, r.method, r.path)
}

func logTimeline(t *testing.T, what string, tl []timedRequest) {
	t.Helper()
	if len(tl) == 0 {
		return
	}
	var b strings.Builder
	for _, r := range tl {
		b.WriteString(r.String(tl[0].start) + "\n")
	}
	t.Logf("%s: %d requests in %d rounds\n%s", what, len(tl), rounds(tl), b.String())
}

// changeCode is a one-line code change of the test application.
func changeCode(line string) func(dir string) {
	return func(dir string) {
		file := filepath.Join(dir, "components", "sbom.orders", "place.js")
		if err := os.WriteFile(file, []byte("module.exports = () => "+line+"\n"), 0o644); err != nil {
			panic(err)
		}
	}
}

// TestCodeChangeRounds: a code change with the default attachments (an SBOM per platform and
// provenance, as referrers, through the referrers tag on a registry without the referrers API)
// takes the rounds of requests of one without them: the attachments' writes go beside the
// image's, and only the tag waits for both, written last.
func TestCodeChangeRounds(t *testing.T) {
	backend := harness.Registry(t)
	addr, proxy := newRoundProxy(t, backend, 150*time.Millisecond)
	harness.PushTestBase(t, addr)
	// what toa-push attaches by default, with its cache of what each layer holds
	attach := attest.Attacher(attest.Options{Format: attest.SPDX, Builder: attest.ToaPush(), Context: "sbom",
		Environment: "default", Runtime: "1.0.0-alpha.289", Created: time.Unix(0, 0).UTC(), CacheDir: cacheDir(t)})
	pushApp(t, addr, nil, attach)
	pushApp(t, addr, nil, attach, changeCode("0"))

	proxy.reset()
	pushApp(t, addr, nil, nil, changeCode("1"))
	bare := proxy.timeline()
	logTimeline(t, "a code change without attachments", bare)

	proxy.reset()
	changed := pushApp(t, addr, nil, attach, changeCode("2"))
	attached := proxy.timeline()
	logTimeline(t, "a code change with the default attachments", attached)

	img := changed.result.Images[0]
	if !img.Built || img.DepsBuilt || len(img.Attachments) == 0 {
		t.Fatalf("built %v, dependencies built %v, %d attachments: want the sources over the registry's dependencies image, attached",
			img.Built, img.DepsBuilt, len(img.Attachments))
	}
	tagPath := "/v2/" + strings.TrimPrefix(img.Repository, addr+"/") + "/manifests/" + img.Tag
	assertTagLast(t, attached, tagPath)
	if late := append(proxy.overrun(bare), proxy.overrun(attached)...); len(late) > 0 {
		t.Skipf("the registry answered %d requests late in their round (%s %s first): the rounds are not round trips on a machine this loaded",
			len(late), late[0].method, late[0].path)
	}
	if got, want := rounds(attached), rounds(bare); got > want {
		t.Errorf("a code change with the default attachments took %d rounds of requests, %d without them", got, want)
	}
}

// assertTagLast checks that the image's tag was written once, after every other request was
// answered.
func assertTagLast(t *testing.T, tl []timedRequest, tagPath string) {
	t.Helper()
	var tag *timedRequest
	for i, r := range tl {
		if r.method == http.MethodPut && r.path == tagPath {
			if tag != nil {
				t.Fatalf("the tag %s was written twice", tagPath)
			}
			tag = &tl[i]
		}
	}
	if tag == nil {
		t.Fatalf("the tag %s was not written", tagPath)
	}
	for _, r := range tl {
		if r != *tag && r.end.After(tag.start) {
			t.Errorf("%s %s was answered after the tag was sent", r.method, r.path)
		}
	}
}
