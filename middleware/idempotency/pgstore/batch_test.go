package pgstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

// The conformance suite again, every statement on its own.
func TestConformanceUnbatched(t *testing.T) {
	pool := testenv.Pool(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s := New(pool, WithBatching(0, 0))
		t.Cleanup(s.Close)
		return s
	}, idempotencytest.TokensFromOne())
}

// TestBatchesShareCommits: many concurrent claims and completions,
// duplicates among them, go out in fewer commits than statements, and each
// key is still claimed exactly once and completed by its owner.
func TestBatchesShareCommits(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := New(pool, WithBatching(2, 32))
	t.Cleanup(s.Close)
	ctx := t.Context()

	const keys, dups = 100, 3
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claimed = map[string]int{}
		errs    []error
	)
	for k := range keys {
		for d := range dups {
			wg.Go(func() {
				sc := idempotency.Scope{Tenant: "t", Route: "r", Key: fmt.Sprintf("k%d", k)}
				owner := fmt.Sprintf("o%d-%d", k, d)
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
	statements := int64(keys*dups + keys)
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		if claimed[key] != 1 {
			t.Fatalf("%s claimed %d times, want once", key, claimed[key])
		}
		rec, err := s.Get(ctx, idempotency.Scope{Tenant: "t", Route: "r", Key: key})
		if err != nil || rec.State != idempotency.StateCompleted {
			t.Fatalf("%s: %+v %v, want completed", key, rec, err)
		}
	}
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
	pool := testenv.Pool(t)
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
