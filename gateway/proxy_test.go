package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/problem"
)

// renewFails is a store that cannot renew a lease: the network to it is
// cut while a request runs.
type renewFails struct{ idempotency.Store }

func (renewFails) Renew(context.Context, idempotency.Scope, string, time.Duration) error {
	return errors.New("store unreachable")
}

// A gateway paused (or cut off from its store) past its lease does not go
// upstream: the key may be someone else's by now. The client is told the
// request was not processed, and the claim is released for its retry.
func TestProxyRefusesAnExpiredLease(t *testing.T) {
	var hits atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)

	store := renewFails{memstore.New()}
	pw := NewProblemWriter(problem.DefaultBase, slog.New(slog.DiscardHandler))
	mw, err := idempotency.New(store, idempotency.Config{Route: "payments", Lease: 100 * time.Millisecond, ErrorHandler: pw.Write})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mw.Drain(context.Background()) }()
	proxy := newProxy(target, http.DefaultTransport, 0, "", mw.Config(), pw)
	paused := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // three leases without a renewal
		proxy.ServeHTTP(w, r)
	}))

	req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "paused")
	w := httptest.NewRecorder()
	paused.ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "idempotency-store-unavailable") || w.Header().Get("Retry-After") == "" {
		t.Fatalf("answer %d %s, want 503 idempotency-store-unavailable with Retry-After", w.Code, w.Body)
	}
	if hits.Load() != 0 {
		t.Fatalf("the upstream got %d requests after the lease expired", hits.Load())
	}
	rec, err := store.Get(t.Context(), idempotency.Scope{Tenant: idempotency.AnonymousTenant, Route: "payments", Key: "paused"})
	if err != nil || rec.State != idempotency.StateReleased {
		t.Fatalf("record %+v, %v; want it released for the retry", rec, err)
	}
}
