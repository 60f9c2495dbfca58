package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestShedBeyondMaxInFlight: with max_in_flight requests held at a slow
// upstream, the next request is answered at once with 503 not-ready and
// Retry-After, reaches neither the store nor the upstream, and is counted;
// /healthz and /readyz still answer. Once the held requests end, the shed
// request's retry, with the same key, runs as a first request.
func TestShedBeyondMaxInFlight(t *testing.T) {
	t.Parallel()
	const limit = 3
	arrived := make(chan string, limit+2)
	release := make(chan struct{})
	releaseAll := sync.OnceFunc(func() { close(release) })
	upstream := func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		arrived <- key
		if !strings.HasSuffix(key, ":shed") {
			<-release // a shed request that got here fails the test, not hangs it
		}
		w.WriteHeader(http.StatusCreated)
	}
	opts := testOptions(nil)
	opts.MaxInFlight = limit
	g, public := servePayments(t, opts, upstream)
	t.Cleanup(releaseAll) // before public.Close, which waits for the held requests
	post := func(key string) (*http.Response, string) {
		return fetch(t, public, http.MethodPost, "/v1/payments", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", key)
	}

	var wg sync.WaitGroup
	held := make([]int, limit)
	for i := range limit {
		wg.Go(func() {
			resp, _ := post("held-" + string(rune('a'+i)))
			held[i] = resp.StatusCode
		})
	}
	for range limit {
		<-arrived
	}

	resp, body := post("shed")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("request beyond max_in_flight: %d %s, want 503 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("shed request has no Retry-After")
	}
	var p struct {
		Type      string
		Detail    string
		Retryable *bool
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("shed request: %v: %s", err, body)
	}
	if !strings.HasSuffix(p.Type, "/not-ready") || !strings.Contains(p.Detail, "overloaded") || p.Retryable == nil || !*p.Retryable {
		t.Errorf("shed request: type %q, detail %q, retryable %v; want a retryable not-ready that says it is overloaded", p.Type, p.Detail, p.Retryable)
	}
	if n := testutil.ToFloat64(g.opts.Metrics.shed); n != 1 {
		t.Errorf("idemgate_requests_shed_total = %v, want 1", n)
	}
	if n := testutil.ToFloat64(g.opts.Metrics.inFlight); n != limit {
		t.Errorf("idemgate_requests_in_flight = %v, want %d", n, limit)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, _ := fetch(t, public, http.MethodGet, path); resp.StatusCode != http.StatusOK {
			t.Errorf("%s at max_in_flight: %d, want 200 (never shed)", path, resp.StatusCode)
		}
	}

	releaseAll()
	wg.Wait()
	for i, code := range held {
		if code != http.StatusCreated {
			t.Errorf("held request %d: %d, want 201", i, code)
		}
	}
	resp, _ = post("shed")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(idempotency.HeaderReplayed) != "" {
		t.Errorf("retry of the shed request: %d, %s %q; want a first run (201, not a replay)",
			resp.StatusCode, idempotency.HeaderReplayed, resp.Header.Get(idempotency.HeaderReplayed))
	}
	if key := <-arrived; !strings.HasSuffix(key, ":shed") {
		t.Errorf("the upstream got key %q, want the shed request's retry", key)
	}
	if n := testutil.ToFloat64(g.opts.Metrics.inFlight); n != 0 {
		t.Errorf("idemgate_requests_in_flight after the requests ended = %v, want 0", n)
	}
}
