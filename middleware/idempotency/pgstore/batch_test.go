package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

	// Hold the only lane with a slow batch so that the next statements
	// queue up and go out together, one of them doomed (division by zero).
	slow := &op{sql: "SELECT pg_sleep(0.3)"}
	slowDone := make(chan error, 1)
	go func() { slowDone <- s.batch.do(context.Background(), slow) }()
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
		bad := &op{sql: "SELECT 1/0", order: idempotency.Scope{Tenant: "zzz"}, scan: func(r pgx.Row) error { var n int; return r.Scan(&n) }}
		badErr = s.batch.do(ctx, bad)
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

// oneConnPool returns a pool of one connection, on a migrated schema of the
// test's own, and that connection, held until the test releases it: a
// batch led meanwhile waits for a connection, not yet sent.
func oneConnPool(t *testing.T) (*pgxpool.Pool, *pgxpool.Conn) {
	t.Helper()
	pool := testkit.PoolAt(t, testkit.Postgres(t)+"&pool_max_conns=1")
	held, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return pool, held
}

// eventually polls cond until it holds, failing the test after waitFor.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitFor)
		}
	}
}

func busyLanes(b *batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy
}

func pendingOps(b *batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// selectOp is a statement that reads n back into *got.
func selectOp(n int, got *int) *op {
	return &op{sql: "SELECT $1::int", args: []any{n}, order: idempotency.Scope{Key: fmt.Sprint(n)},
		scan: func(r pgx.Row) error { return r.Scan(got) }}
}

// TestBatchHandedOnWhenItsLeaderGivesUp: a caller chosen to lead a batch
// whose context ends before the batch is sent leaves at once, its
// statement never sent, and the batch goes out all the same, led by one
// of its other callers, in one round trip.
func TestBatchHandedOnWhenItsLeaderGivesUp(t *testing.T) {
	t.Parallel()
	pool, held := oneConnPool(t)
	s := New(pool, WithBatching(1, 64))
	t.Cleanup(s.Close)

	// first takes the only lane and waits for the held connection...
	firstCtx, cancelFirst := context.WithCancel(t.Context())
	defer cancelFirst()
	var got [4]int
	first, lead, b, c := selectOp(0, &got[0]), selectOp(1, &got[1]), selectOp(2, &got[2]), selectOp(3, &got[3])
	leadCtx, cancelLead := context.WithCancel(t.Context())
	defer cancelLead()
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	wg.Go(func() { errs <- s.batch.do(firstCtx, first) })
	eventually(t, "first leads", func() bool { return busyLanes(s.batch) == 1 })
	// ...so the others queue behind it, lead first.
	wg.Go(func() { errs <- s.batch.do(leadCtx, lead) })
	eventually(t, "lead queues", func() bool { return pendingOps(s.batch) == 1 })
	wg.Go(func() { errs <- s.batch.do(t.Context(), b) })
	wg.Go(func() { errs <- s.batch.do(t.Context(), c) })
	eventually(t, "the others queue", func() bool { return pendingOps(s.batch) == 3 })

	// first gives up: its batch hands the queue to lead, which waits for
	// the connection in its turn, and gives up too.
	cancelFirst()
	eventually(t, "lead is handed the batch", func() bool { return lead.state.Load() == leads })
	cancelLead()
	eventually(t, "the batch is handed on", func() bool { return b.state.Load() == leads || c.state.Load() == leads })
	held.Release()
	wg.Wait()
	close(errs)
	var canceled int
	for err := range errs {
		switch {
		case errors.Is(err, context.Canceled):
			canceled++
		case err != nil:
			t.Fatal(err)
		}
	}
	if canceled != 2 {
		t.Fatalf("%d calls returned context.Canceled, want the 2 whose callers gave up", canceled)
	}
	for _, o := range []*op{first, lead} {
		if pid := sentTo(o); pid != 0 {
			t.Fatalf("a statement whose caller gave up before its batch was sent went to backend %d", pid)
		}
	}
	if got[2] != 2 || got[3] != 3 {
		t.Fatalf("the remaining statements read %d and %d, want 2 and 3", got[2], got[3])
	}
	if sent, batches := s.batch.statements.Load(), s.batch.batches.Load(); sent != 2 || batches != 1 {
		t.Fatalf("%d statements in %d batches went out, want the 2 left in 1", sent, batches)
	}
}

// TestBatchRerunWhenItsLeaderGivesUpMidFlight: a leader whose context ends
// while its batch is on the wire returns at once and ends the batch; a
// claim that was in the same batch runs again on its own and is claimed.
func TestBatchRerunWhenItsLeaderGivesUpMidFlight(t *testing.T) {
	t.Parallel()
	pool, held := oneConnPool(t)
	s := New(pool, WithBatching(1, 64))
	t.Cleanup(s.Close)

	firstCtx, cancelFirst := context.WithCancel(t.Context())
	defer cancelFirst()
	first := &op{sql: "SELECT 1"}
	var wg sync.WaitGroup
	var firstErr, leadErr, claimErr error
	wg.Go(func() { firstErr = s.batch.do(firstCtx, first) })
	eventually(t, "first leads", func() bool { return busyLanes(s.batch) == 1 })

	// lead sorts first (the zero scope), so it holds the batch up on the wire.
	leadCtx, cancelLead := context.WithCancel(t.Context())
	defer cancelLead()
	lead := &op{sql: "SELECT pg_sleep(30)"}
	wg.Go(func() { leadErr = s.batch.do(leadCtx, lead) })
	eventually(t, "lead queues", func() bool { return pendingOps(s.batch) == 1 })
	req := claimReq("mid-flight", "o")
	wg.Go(func() {
		var res idempotency.ClaimResult
		res, claimErr = s.Claim(t.Context(), req)
		if claimErr == nil && !res.Claimed {
			claimErr = fmt.Errorf("not claimed: %+v", res.Record)
		}
	})
	eventually(t, "the claim queues", func() bool { return pendingOps(s.batch) == 2 })

	cancelFirst()
	eventually(t, "lead is handed the batch", func() bool { return lead.state.Load() == leads })
	held.Release()
	eventually(t, "the batch is sent", func() bool { return sentTo(lead) != 0 })
	cancelLead()
	wg.Wait()
	if !errors.Is(firstErr, context.Canceled) || !errors.Is(leadErr, context.Canceled) {
		t.Fatalf("the callers that gave up: %v and %v, want context.Canceled", firstErr, leadErr)
	}
	if claimErr != nil {
		t.Fatalf("the claim whose batch its leader ended: %v", claimErr)
	}
	if rec, err := s.Get(t.Context(), req.Scope); err != nil || rec.State != idempotency.StateInFlight || rec.Owner != "o" {
		t.Fatalf("the claim's record: %+v, %v", rec, err)
	}
}
