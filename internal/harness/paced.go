package harness

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Paced is a proxy in front of a registry that holds each request until its pace lets it go
// on, as a registry across a network answers a round trip late, and keeps when each request
// came, went on and was answered: the timeline of a push, whatever the machine's load.
type Paced struct {
	Addr string // what the client talks to, "127.0.0.1:PORT"

	pace     Pace
	mu       sync.Mutex
	requests []PacedRequest
}

// PacedRequest is one request through a Paced proxy.
type PacedRequest struct {
	Method, Path                string
	Arrived, Released, Answered time.Time
}

// Pace says when a request that arrived may go on to the registry.
type Pace func(arrived time.Time) time.Time

// Far holds every request rtt, as a registry that far away would.
func Far(rtt time.Duration) Pace {
	return func(arrived time.Time) time.Time { return arrived.Add(rtt) }
}

// InRounds lets requests go at the ticks of period, counted from now: requests sent together go
// in one round, and one sent once another was answered goes in a later one, so that a round is
// a round trip as long as the registry answers, and the client sends what follows, within the
// period.
func InRounds(period time.Duration) Pace {
	origin := time.Now()
	return func(arrived time.Time) time.Time {
		return origin.Add((arrived.Sub(origin)/period + 1) * period)
	}
}

// PacedProxy starts a Paced proxy in front of the registry at backend ("127.0.0.1:PORT"); it
// stops with the test.
func PacedProxy(t testing.TB, backend string, pace Pace) *Paced {
	t.Helper()
	p := &Paced{pace: pace}
	proxy := registryProxy(backend)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		released := p.pace(arrived)
		time.Sleep(time.Until(released))
		proxy.ServeHTTP(w, r)
		p.mu.Lock()
		p.requests = append(p.requests, PacedRequest{Method: r.Method, Path: r.URL.Path, Arrived: arrived,
			Released: released, Answered: time.Now()})
		p.mu.Unlock()
	}))
	t.Cleanup(server.Close)
	p.Addr = strings.TrimPrefix(server.URL, "http://")
	return p
}

// Reset forgets the requests seen so far.
func (p *Paced) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = nil
}

// Requests are the requests answered since the last Reset, in the order they came.
func (p *Paced) Requests() []PacedRequest {
	p.mu.Lock()
	out := slices.Clone(p.requests)
	p.mu.Unlock()
	slices.SortStableFunc(out, func(a, b PacedRequest) int { return a.Arrived.Compare(b.Arrived) })
	return out
}
