package idempotency_test

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// claimCounter counts the claims that reach the store.
type claimCounter struct {
	idempotency.Store
	claims atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, req)
}

func TestReplayCache(t *testing.T) {
	t.Parallel()
	store := &claimCounter{Store: memstore.New()}
	cache := idempotency.NewReplayCache(100, time.Hour)
	h := &counter{}
	srv := newMW(t, store, idempotency.Config{ReplayCache: cache}).Wrap(h)

	first := do(srv, call{key: "k1"})
	if first.Code != 201 {
		t.Fatalf("first: %d", first.Code)
	}
	for range 3 {
		again := do(srv, call{key: "k1"})
		if again.Code != 201 || again.Header().Get(idempotency.HeaderReplayed) != "true" || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
			t.Fatalf("replay: %d replayed=%q body %q, want the first response", again.Code, again.Header().Get(idempotency.HeaderReplayed), again.Body)
		}
		if again.Header().Get("Location") != first.Header().Get("Location") {
			t.Fatalf("replay Location %q, want %q", again.Header().Get("Location"), first.Header().Get("Location"))
		}
	}
	if n := store.claims.Load(); n != 1 {
		t.Fatalf("%d claims reached the store, want 1: replays of a completed record come from the cache", n)
	}
	// A different request with the same key is still refused.
	if w := do(srv, call{key: "k1", body: `{"amount":999}`}); w.Code != 422 || problemType(t, w) != "idempotency-key-reused" {
		t.Fatalf("reused key with another body: %d %s", w.Code, w.Body)
	}
	// Another tenant's key of the same name is its own record.
	if w := do(srv, call{key: "k1", tenant: "other"}); w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("another tenant's first request: %d replayed=%q", w.Code, w.Header().Get(idempotency.HeaderReplayed))
	}
	if h.calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", h.calls.Load())
	}

	// Forget: after an operator deletes the record, the next request runs.
	scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k1"}
	if err := store.Delete(t.Context(), scope); err != nil {
		t.Fatal(err)
	}
	cache.Forget(scope)
	if w := do(srv, call{key: "k1"}); w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("after delete and Forget: %d replayed=%q, want a new execution", w.Code, w.Header().Get(idempotency.HeaderReplayed))
	}
}

// TestReplayCacheNeverServesInFlight: a duplicate of a request still
// running goes to the store (409), and a released attempt is not cached.
func TestReplayCacheNeverServesInFlight(t *testing.T) {
	t.Parallel()
	store := &claimCounter{Store: memstore.New()}
	cache := idempotency.NewReplayCache(100, time.Hour)
	release := make(chan struct{})
	started := make(chan struct{})
	h := &gate{started: started, release: release}
	srv := newMW(t, store, idempotency.Config{ReplayCache: cache}).Wrap(h)

	done := make(chan int)
	go func() { done <- do(srv, call{key: "slow"}).Code }()
	<-started
	if w := do(srv, call{key: "slow"}); w.Code != 409 {
		t.Fatalf("duplicate of a request in flight: %d, want 409", w.Code)
	}
	close(release)
	if code := <-done; code != 503 {
		t.Fatalf("original: %d, want the upstream's 503", code)
	}
	// 503 released the key: the retry runs again, it is not a replay.
	h.status = 201
	if w := do(srv, call{key: "slow"}); w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("retry after a release: %d replayed=%q, want a new execution", w.Code, w.Header().Get(idempotency.HeaderReplayed))
	}
}

// gate answers the first request only once released, with 503.
type gate struct {
	started, release chan struct{}
	once             atomic.Bool
	status           int
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.once.CompareAndSwap(false, true) {
		close(g.started)
		<-g.release
		w.WriteHeader(503)
		return
	}
	w.WriteHeader(g.status)
}

func TestReplayCacheOff(t *testing.T) {
	t.Parallel()
	if idempotency.NewReplayCache(0, time.Second) != nil || idempotency.NewReplayCache(10, 0) != nil {
		t.Fatal("a cache of no entries or no TTL must be off (nil)")
	}
	// A nil cache is a valid "off".
	var c *idempotency.ReplayCache
	c.Forget(idempotency.Scope{})
}
