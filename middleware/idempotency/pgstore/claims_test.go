package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestClaimLedger: every claim leaves a row with its token and instance;
// a take-over after an expired lease ends the first as taken_over, the
// first owner's late completion is recorded as refused, a release keeps
// its reason, and the janitor deletes the claims with their record.
func TestClaimLedger(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	gwA := New(pool, WithInstance("gw-a"))
	t.Cleanup(gwA.Close)
	gwB := New(pool, WithInstance("gw-b"))
	t.Cleanup(gwB.Close)
	ctx := t.Context()
	scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k1"}

	if _, err := gwA.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "a1", Lease: 50 * time.Millisecond, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := gwA.Release(idempotency.WithReleaseReason(ctx, "not processed: the upstream answered 503"), scope, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := gwA.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "a2", Lease: 50 * time.Millisecond, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // gw-a "dies": its lease expires
	res, err := gwB.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "b1", Lease: 30 * time.Second, Retention: time.Hour})
	if err != nil || !res.Claimed || !res.TakeOver {
		t.Fatalf("take-over: %+v %v", res, err)
	}
	if err := gwA.Complete(ctx, scope, "a2", idempotency.Response{Status: 201}, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("the first owner's late completion: %v, want ErrNotOwner", err)
	}
	if err := gwB.Complete(ctx, scope, "b1", idempotency.Response{Status: 201}, time.Hour); err != nil {
		t.Fatal(err)
	}

	claims, err := gwB.Claims(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	want := []Claim{
		{Instance: "gw-a", Outcome: "released", Reason: "not processed: the upstream answered 503"},
		{Instance: "gw-a", Outcome: "refused", Reason: "completion refused: the claim was taken over", Status: 201},
		{FencingToken: res.Record.FencingToken, Instance: "gw-b", Outcome: "completed", Status: 201},
	}
	if len(claims) != len(want) {
		t.Fatalf("claims %+v, want %d", claims, len(want))
	}
	for i, w := range want {
		c := claims[i]
		if i > 0 && c.FencingToken <= claims[i-1].FencingToken {
			t.Errorf("claim %d: token %d, not above the claim before (%d)", i, c.FencingToken, claims[i-1].FencingToken)
		}
		if (w.FencingToken != 0 && c.FencingToken != w.FencingToken) || c.Instance != w.Instance || c.Outcome != w.Outcome || c.Reason != w.Reason ||
			c.Status != w.Status || c.EndedAt.IsZero() || c.ClaimedAt.IsZero() {
			t.Errorf("claim %d: %+v, want %+v", i, c, w)
		}
	}

	// The janitor deletes the claims with their record.
	if _, err := pool.Exec(ctx, `UPDATE idempotency_records SET expires_at = now() - interval '1 second' WHERE key = 'k1'`); err != nil {
		t.Fatal(err)
	}
	if n, err := gwB.DeleteExpired(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("DeleteExpired: %d %v, want 1", n, err)
	}
	if claims, err := gwB.Claims(ctx, scope); err != nil || len(claims) != 0 {
		t.Fatalf("claims after the janitor: %+v %v, want none", claims, err)
	}
}

// TestCompletionUpdatesTheClaimInPlace: the ledger row a completion ends
// stays on its page (migration 00011 leaves room), so the update adds no
// index entries. Claims are completed 32 behind, as under concurrent load.
func TestCompletionUpdatesTheClaimInPlace(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := New(pool, WithBatching(0, 0))
	t.Cleanup(s.Close)
	ctx := t.Context()
	const n, behind = 400, 32
	page := func(key string) int64 {
		t.Helper()
		var block int64
		if err := pool.QueryRow(ctx, `SELECT (ctid::text::point)[0]::bigint FROM idempotency_claims WHERE key = $1`, key).Scan(&block); err != nil {
			t.Fatal(err)
		}
		return block
	}
	claimed := make([]int64, n)
	moved := 0
	complete := func(i int) {
		key := fmt.Sprintf("k%d", i)
		scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: key}
		if err := s.Complete(ctx, scope, "o"+key, idempotency.Response{Status: 201}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if page(key) != claimed[i] {
			moved++
		}
	}
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		req := idempotency.ClaimRequest{Scope: idempotency.Scope{Tenant: "acme", Route: "payments", Key: key}, Fingerprint: "fp", Owner: "o" + key, Lease: time.Minute, Retention: time.Hour}
		if _, err := s.Claim(ctx, req); err != nil {
			t.Fatal(err)
		}
		claimed[i] = page(key)
		if i >= behind {
			complete(i - behind)
		}
	}
	for i := n - behind; i < n; i++ {
		complete(i)
	}
	t.Logf("%d of %d completed claims moved to another page", moved, n)
	if moved > n/20 {
		t.Fatalf("%d of %d completed claims moved to another page; want their updates in place", moved, n)
	}
}
