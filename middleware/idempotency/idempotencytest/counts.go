package idempotencytest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// testRequestCounts checks an idempotency.RequestCounter: counts added in
// batches sum up beside the record, a take-over of a released record keeps
// them, a scope without a record gets none, and they go when the record
// expires or is deleted, so that a record created afresh under the same
// key starts from zero.
func testRequestCounts(t *testing.T, s idempotency.Store) {
	c, ok := s.(idempotency.RequestCounter)
	if !ok {
		t.Skip("store does not implement idempotency.RequestCounter")
	}
	ctx := t.Context()
	counts := func(scope idempotency.Scope) idempotency.KeyCount {
		t.Helper()
		got, err := c.RequestCounts(ctx, scope)
		if err != nil {
			t.Fatalf("RequestCounts(%+v): %v", scope, err)
		}
		return got
	}
	same := func(what string, got, want idempotency.KeyCount) {
		t.Helper()
		// The stores keep times to the millisecond at least.
		if got.New != want.New || got.Replayed != want.Replayed || got.Conflict != want.Conflict ||
			got.Mismatch != want.Mismatch || got.Released != want.Released ||
			!got.First.Truncate(time.Millisecond).Equal(want.First) || !got.Last.Truncate(time.Millisecond).Equal(want.Last) {
			t.Errorf("%s: counts %+v, want %+v", what, got, want)
		}
	}
	t0 := time.Now().Truncate(time.Millisecond)

	missing := newScope()
	if _, err := c.RequestCounts(ctx, missing); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("RequestCounts of a scope without a record: %v, want ErrNotFound", err)
	}

	kept := newScope()
	req := claimReq(kept, "fp")
	mustClaim(t, s, req)
	same("a record nothing was added to", counts(kept), idempotency.KeyCount{Scope: kept})
	if err := c.AddRequests(ctx, []idempotency.KeyCount{
		{Scope: kept, New: 1, First: t0, Last: t0},
		{Scope: missing, Replayed: 5, First: t0, Last: t0},
	}); err != nil {
		t.Fatalf("AddRequests: %v", err)
	}
	if err := c.AddRequests(ctx, []idempotency.KeyCount{
		{Scope: kept, Replayed: 2, Conflict: 1, Mismatch: 1, First: t0.Add(time.Second), Last: t0.Add(2 * time.Second)},
	}); err != nil {
		t.Fatalf("AddRequests: %v", err)
	}
	want := idempotency.KeyCount{Scope: kept, New: 1, Replayed: 2, Conflict: 1, Mismatch: 1, First: t0, Last: t0.Add(2 * time.Second)}
	same("two batches added", counts(kept), want)
	if _, err := s.Get(ctx, missing); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("counts added to a scope without a record made one: %v", err)
	}
	if _, err := c.RequestCounts(ctx, missing); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("counts added to a scope without a record were kept: %v", err)
	}

	// A released attempt keeps its record, and the retry that takes it
	// over keeps the counts with it.
	if err := s.Release(ctx, kept, req.Owner); err != nil {
		t.Fatal(err)
	}
	if err := c.AddRequests(ctx, []idempotency.KeyCount{{Scope: kept, Released: 1, First: t0.Add(3 * time.Second), Last: t0.Add(3 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if res := mustClaim(t, s, claimReq(kept, "fp")); !res.Claimed || !res.TakeOver {
		t.Fatalf("claim of the released record: %+v", res)
	}
	want.Released, want.Last = 1, t0.Add(3*time.Second)
	same("a released record taken over", counts(kept), want)

	// Deleting the record deletes its counts.
	if err := s.Delete(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RequestCounts(ctx, kept); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("RequestCounts after Delete: %v, want ErrNotFound", err)
	}
	mustClaim(t, s, claimReq(kept, "fp"))
	same("a record created afresh after Delete", counts(kept), idempotency.KeyCount{Scope: kept})

	// The counts of a record that expires go with it.
	short := newScope()
	req = claimReq(short, "fp")
	mustClaim(t, s, req)
	if err := c.AddRequests(ctx, []idempotency.KeyCount{{Scope: short, New: 1, Replayed: 3, First: t0, Last: t0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, short, req.Owner, sampleResponse(), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record expired", func() bool {
		_, err := s.Get(ctx, short)
		return errors.Is(err, idempotency.ErrNotFound)
	})
	if _, err := c.RequestCounts(ctx, short); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("RequestCounts after the record expired: %v, want ErrNotFound", err)
	}
	if err := c.AddRequests(ctx, []idempotency.KeyCount{{Scope: short, Replayed: 7, First: t0, Last: t0}}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, claimReq(short, "fp-other"))
	same("a record created afresh after the last expired", counts(short), idempotency.KeyCount{Scope: short})
}
