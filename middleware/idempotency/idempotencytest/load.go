package idempotencytest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// ClaimCompleteLoad claims keys keys, each dups times at once under
// owners of its own, and completes each key with the owner that claimed
// it; it then checks that every key was claimed exactly once and is
// completed. A store that shares round trips or commits between callers
// runs it to show that sharing keeps each caller's answer its own; the
// store's counters of what it shared are the caller's to check. The keys
// are k0, k1, ... under tenant t and route r: the store must start empty
// of them.
func ClaimCompleteLoad(t testing.TB, s idempotency.Store, keys, dups int) {
	t.Helper()
	ctx := t.Context()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claimed = map[string]int{}
		errs    []error
	)
	for k := range keys {
		for d := range dups {
			wg.Go(func() {
				sc := idempotency.Scope{Tenant: "t", Route: "r", Key: fmt.Sprint("k", k)}
				owner := fmt.Sprint("o", k, "-", d)
				res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Hour})
				if err == nil && res.Claimed {
					err = s.Complete(ctx, sc, owner, idempotency.Response{Status: 201, Body: []byte(owner)}, time.Hour)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if res.Claimed {
					claimed[sc.Key]++
				}
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	for k := range keys {
		sc := idempotency.Scope{Tenant: "t", Route: "r", Key: fmt.Sprint("k", k)}
		if claimed[sc.Key] != 1 {
			t.Fatalf("%s claimed %d times, want once", sc.Key, claimed[sc.Key])
		}
		if rec, err := s.Get(ctx, sc); err != nil || rec.State != idempotency.StateCompleted {
			t.Fatalf("%s: %+v %v, want completed", sc.Key, rec, err)
		}
	}
}
