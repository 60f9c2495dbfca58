package idempotencytest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// KeyPager is a store that pages through every key of a tenant and route,
// as the operator console's keys list asks of pgstore and memstore.
type KeyPager interface {
	idempotency.Store
	Keys(ctx context.Context, tenant, route string, state idempotency.State, after string, limit int) ([]idempotency.Record, string, error)
}

// Keys checks a KeyPager: paging 7 at a time through 23 keys of one
// tenant and route reaches every one of them once, in key order, and no
// key of another tenant or route; a state keeps its records only.
func Keys(t *testing.T, s KeyPager) {
	t.Helper()
	ctx := t.Context()
	var want []string
	for i := range 23 {
		key := fmt.Sprintf("page-%02d", i)
		want = append(want, key)
		for _, sc := range []idempotency.Scope{{Tenant: "acme", Route: "paged", Key: key}, {Tenant: "globex", Route: "paged", Key: key + "x"}} {
			if res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour}); err != nil || !res.Claimed {
				t.Fatalf("claim %v: %+v %v", sc, res, err)
			}
		}
	}
	if err := s.Complete(ctx, idempotency.Scope{Tenant: "acme", Route: "paged", Key: "page-05"}, "o", idempotency.Response{Status: 201}, time.Hour); err != nil {
		t.Fatal(err)
	}
	var got []string
	after, pages := "", 0
	for {
		recs, next, err := s.Keys(ctx, "acme", "paged", "", after, 7)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range recs {
			got = append(got, r.Scope.Key)
		}
		if next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		after = next
	}
	if !slices.Equal(got, want) || pages != 4 {
		t.Errorf("paged keys in %d pages = %v, want %v in 4", pages, got, want)
	}
	done, next, err := s.Keys(ctx, "acme", "paged", idempotency.StateCompleted, "", 7)
	if err != nil || len(done) != 1 || done[0].Scope.Key != "page-05" || next != "" {
		t.Errorf("completed keys: %v next %q %v", done, next, err)
	}
}
