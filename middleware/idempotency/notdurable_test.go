package idempotency_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestClaimNotDurable: a claim the store made but cannot say is durable
// (ErrNotDurable: its replicas did not acknowledge it) is refused with
// 503 and Retry-After, never sent on, also under fail_open; it is let go,
// so the retry runs, once.
func TestClaimNotDurable(t *testing.T) {
	for _, policy := range []idempotency.StoreErrorPolicy{idempotency.FailClosed, idempotency.FailOpen} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			store := newFaultyStore()
			mw := newMW(t, store, idempotency.Config{OnStoreError: policy})
			drainAtCleanup(t, mw)
			h := &counter{}
			srv := mw.Wrap(h)

			store.claimNotDurable.Store(true)
			w := do(srv, call{key: "k"})
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
				t.Fatalf("answer %d (Retry-After %q) %s, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
			}
			if n := h.calls.Load(); n != 0 {
				t.Fatalf("the handler ran %d times, want 0", n)
			}

			store.claimNotDurable.Store(false)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for {
				// The claim is released in the background: until then
				// the key is in flight (409).
				w = do(srv, call{key: "k"})
				if w.Code != http.StatusConflict || ctx.Err() != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if w.Code != http.StatusCreated || h.calls.Load() != 1 {
				t.Fatalf("retry: %d %s after %d runs, want 201 from one run", w.Code, w.Body, h.calls.Load())
			}
		})
	}
}
