package attest_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/attest"
)

// roundPeriod is a round of the proxy's (harness.InRounds): a round trip, however long the
// registry and the client take within it.
const roundPeriod = 150 * time.Millisecond

// timedRequest is one request through the proxy, and its round.
type timedRequest struct {
	harness.PacedRequest
	round int
}

// timeline is the requests the proxy answered since its last reset, in the order they came,
// their rounds counted from the first one's.
func timeline(p *harness.Paced) []timedRequest {
	var out []timedRequest
	requests := p.Requests()
	for _, r := range requests {
		out = append(out, timedRequest{r, int(r.Released.Sub(requests[0].Released)/roundPeriod) + 1})
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
func overrun(tl []timedRequest) []timedRequest {
	var out []timedRequest
	for _, r := range tl {
		if r.Answered.Sub(r.Released) > roundPeriod*3/4 {
			out = append(out, r)
		}
	}
	return out
}

func (r timedRequest) String(origin time.Time) string {
	return fmt.Sprintf("%2d %6.0f ms %6.0f ms  %-4s %s", r.round, float64(r.Arrived.Sub(origin).Microseconds())/1000,
		float64(r.Answered.Sub(origin).Microseconds())/1000, r.Method, r.Path)
}

func logTimeline(t *testing.T, what string, tl []timedRequest) {
	t.Helper()
	if len(tl) == 0 {
		return
	}
	var b strings.Builder
	for _, r := range tl {
		b.WriteString(r.String(tl[0].Arrived) + "\n")
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
	proxy := harness.PacedProxy(t, backend, harness.InRounds(roundPeriod))
	addr := proxy.Addr
	harness.PushTestBase(t, addr)
	// what toa-push attaches by default, with its cache of what each layer holds
	attach := attest.Attacher(attest.Options{Format: attest.SPDX, Builder: attest.ToaPush(), Context: "sbom",
		Environment: "default", Runtime: "1.0.0-alpha.289", Created: time.Unix(0, 0).UTC(), CacheDir: cacheDir(t)})
	pushApp(t, addr, nil, attach)
	pushApp(t, addr, nil, attach, changeCode("0"))

	proxy.Reset()
	pushApp(t, addr, nil, nil, changeCode("1"))
	bare := timeline(proxy)
	logTimeline(t, "a code change without attachments", bare)

	proxy.Reset()
	changed := pushApp(t, addr, nil, attach, changeCode("2"))
	attached := timeline(proxy)
	logTimeline(t, "a code change with the default attachments", attached)

	img := changed.result.Images[0]
	if !img.Built || img.DepsBuilt || len(img.Attachments) == 0 {
		t.Fatalf("built %v, dependencies built %v, %d attachments: want the sources over the registry's dependencies image, attached",
			img.Built, img.DepsBuilt, len(img.Attachments))
	}
	tagPath := "/v2/" + strings.TrimPrefix(img.Repository, addr+"/") + "/manifests/" + img.Tag
	assertTagLast(t, attached, tagPath)
	if late := append(overrun(bare), overrun(attached)...); len(late) > 0 {
		t.Skipf("the registry answered %d requests late in their round (%s %s first): the rounds are not round trips on a machine this loaded",
			len(late), late[0].Method, late[0].Path)
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
		if r.Method == http.MethodPut && r.Path == tagPath {
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
		if r != *tag && r.Answered.After(tag.Arrived) {
			t.Errorf("%s %s was answered after the tag was sent", r.Method, r.Path)
		}
	}
}
