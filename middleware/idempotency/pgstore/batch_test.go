package pgstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

// The conformance suite again, every statement on its own.
func TestConformanceUnbatched(t *testing.T) {
	pool := testkit.Pool(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s := New(pool, WithBatching(0, 0))
		t.Cleanup(s.Close)
		return s
	})
}

// TestBatchesShareCommits: many concurrent claims and completions,
// duplicates among them, go out in fewer commits than statements, and each
// key is still claimed exactly once and completed by its owner.
func TestBatchesShareCommits(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := New(pool, WithBatching(2, 32))
	t.Cleanup(s.Close)
	const keys, dups = 100, 3
	idempotencytest.ClaimCompleteLoad(t, s, keys, dups)
	statements := int64(keys*dups + keys)
	sent, batches := s.batch.statements.Load(), s.batch.batches.Load()
	t.Logf("%d statements in %d batches", sent, batches)
	if sent < statements {
		t.Fatalf("the batcher carried %d statements, want all %d", sent, statements)
	}
	if batches >= sent {
		t.Fatalf("%d statements went out in %d batches: nothing was shared", sent, batches)
	}
}

// TestBatchFallsBackWhenAStatementFails: a statement that fails aborts
// its whole batch; every other statement of that batch then runs on its
// own and succeeds.
func TestBatchFallsBackWhenAStatementFails(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := New(pool, WithBatching(1, 64))
	t.Cleanup(s.Close)
	ctx := t.Context()

	// Hold the only flusher with a slow batch so that the next statements
	// queue up and go out together, one of them doomed (a negative lease
	// interval breaks the in-flight CHECK).
	slow := &op{sql: "SELECT pg_sleep(0.3)", order: ""}
	slowDone := make(chan error, 1)
	go func() { err, _ := s.batch.do(context.Background(), slow); slowDone <- err }()
	time.Sleep(50 * time.Millisecond)

	var wg sync.WaitGroup
	results := make([]error, 10)
	for i := range results {
		wg.Go(func() {
			sc := idempotency.Scope{Tenant: "t", Route: "r", Key: fmt.Sprintf("good-%d", i)}
			_, results[i] = s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour})
		})
	}
	var badErr error
	wg.Go(func() {
		bad := &op{sql: "SELECT 1/0", order: "zzz", scan: func(r pgx.Row) error { var n int; return r.Scan(&n) }}
		badErr, _ = s.batch.do(ctx, bad)
	})
	wg.Wait()
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	if badErr == nil {
		t.Fatal("the failing statement reported no error")
	}
	for i, err := range results {
		if err != nil {
			t.Fatalf("claim %d failed with its batch: %v", i, err)
		}
		sc := idempotency.Scope{Tenant: "t", Route: "r", Key: fmt.Sprintf("good-%d", i)}
		if rec, err := s.Get(ctx, sc); err != nil || rec.State != idempotency.StateInFlight {
			t.Fatalf("claim %d: record %+v %v", i, rec, err)
		}
	}
}
