package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestDrainingGatewayServesButIsNotReady: once draining, the gateway goes
// on answering requests, fresh and replayed, but /readyz fails with a
// not-ready problem that says it is draining, and every answer closes its
// connection so that a proxy stops reusing it.
func TestDrainingGatewayServesButIsNotReady(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	g, public := servePayments(t, testOptions(nil), func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	post := func(key string) *http.Response {
		t.Helper()
		resp, _ := fetch(t, public, http.MethodPost, "/v1/payments", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", key)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST with key %s: %d, want 201", key, resp.StatusCode)
		}
		return resp
	}

	if resp, _ := fetch(t, public, http.MethodGet, "/readyz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz before draining: %d, want 200", resp.StatusCode)
	}
	if resp := post("k1"); resp.Close {
		t.Errorf("an answer before draining closes its connection")
	}
	if g.Draining() {
		t.Fatal("Draining before StartDraining")
	}

	g.StartDraining()
	g.StartDraining() // a second signal changes nothing
	resp, body := fetch(t, public, http.MethodGet, "/readyz")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("/readyz while draining: %d %s, want 503 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var p struct{ Type, Detail string }
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("/readyz while draining: %v: %s", err, body)
	}
	if !strings.HasSuffix(p.Type, "/not-ready") || !strings.Contains(p.Detail, "draining") {
		t.Errorf("/readyz while draining: type %q, detail %q; want not-ready saying it is draining", p.Type, p.Detail)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("/readyz while draining has no Retry-After")
	}
	if resp := post("k2"); !resp.Close {
		t.Errorf("a fresh answer while draining keeps its connection open")
	}
	if resp := post("k1"); !resp.Close || resp.Header.Get(idempotency.HeaderReplayed) == "" {
		t.Errorf("a replay while draining: Close %v, %s %q; want a replay that closes its connection",
			resp.Close, idempotency.HeaderReplayed, resp.Header.Get(idempotency.HeaderReplayed))
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the upstream was called %d times, want 2 (k1 once, k2 once)", n)
	}
}
