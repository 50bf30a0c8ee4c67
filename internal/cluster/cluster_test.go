package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

const configMap = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}`

// The run's client sets no client-side rate limit: the server's pace decides.
func TestNoClientSideLimit(t *testing.T) {
	k, err := New(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if l := k.Typed.CoreV1().RESTClient().GetRateLimiter(); l != nil {
		t.Errorf("the typed client has a rate limiter: %T (%v QPS)", l, l.QPS())
	}
}

// A server that sheds load (API Priority and Fairness: 429 with Retry-After) is waited for and
// asked again, a PATCH as a GET, as long as it says.
func TestRetryAfter(t *testing.T) {
	var calls atomic.Int32
	var first, last atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		last.Store(now)
		if n%3 != 0 { // two refusals before each answer
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(configMap))
	}))
	defer srv.Close()
	k, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := k.Typed.CoreV1().ConfigMaps("ns").Get(ctx, "c", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET after two 429s: %v", err)
	}
	force := true
	_, err = k.Typed.CoreV1().ConfigMaps("ns").Patch(ctx, "c", types.ApplyPatchType, []byte(configMap),
		metav1.PatchOptions{FieldManager: "toa", Force: &force})
	if err != nil {
		t.Fatalf("PATCH after two 429s: %v", err)
	}
	if n := calls.Load(); n != 6 {
		t.Errorf("%d requests, want 6 (each refused twice)", n)
	}
	if waited := time.Duration(last.Load() - first.Load()); waited < 3500*time.Millisecond {
		t.Errorf("the retries came %s after the first request: Retry-After: 1 was not honoured (want 4 waits of 1 s)", waited)
	}
}

// At most MaxInFlight requests are in flight at once; a watch does not count.
func TestMaxInFlight(t *testing.T) {
	var now, peak atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		n := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(configMap))
	}))
	defer srv.Close()
	k, err := newWith(&rest.Config{Host: srv.URL}, 4)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a watch holds no slot
	w, err := k.Typed.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := k.Dynamic.Resource(configMaps).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
			errs <- err
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for now.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for a fifth, were the bound not kept
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if p := peak.Load(); p != 4 {
		t.Errorf("%d requests in flight at most, want 4", p)
	}
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
