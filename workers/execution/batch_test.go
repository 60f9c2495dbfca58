package execution_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

// countingPool counts the round trips the store makes (a statement on its
// own, or a batch) and can make batches fail.
type countingPool struct {
	*pgxpool.Pool
	singles, batches, batched atomic.Int64
	// firstDelay holds the first statement sent on its own, so that the
	// writers arriving meanwhile queue behind it.
	firstDelay time.Duration
	first      sync.Once
	// fail makes every batch fail: "rolled back" sends it under a
	// cancelled context, "committed" runs it and then reports an error, as
	// a connection lost at commit would.
	fail string
}

func (p *countingPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	p.singles.Add(1)
	p.first.Do(func() { time.Sleep(p.firstDelay) })
	return p.Pool.QueryRow(ctx, sql, args...)
}

func (p *countingPool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	p.batches.Add(1)
	p.batched.Add(int64(b.Len()))
	switch p.fail {
	case "rolled back":
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		return p.Pool.SendBatch(cctx, b)
	case "committed":
		err := p.Pool.SendBatch(ctx, b).Close()
		return failedResults{fmt.Errorf("connection lost at commit (after %v)", err)}
	}
	return p.Pool.SendBatch(ctx, b)
}

// failedResults is a batch whose every result is err.
type failedResults struct{ err error }

func (r failedResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, r.err }
func (r failedResults) Query() (pgx.Rows, error)         { return nil, r.err }
func (r failedResults) QueryRow() pgx.Row                { return errRow(r) }
func (r failedResults) Close() error                     { return r.err }
func (r failedResults) Tx() pgx.Tx                       { return nil }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// runJobs takes and then marks succeeded n jobs at once, each on its own
// key and resource, and checks that every one ended succeeded with one
// succeeded ledger row last.
func runJobs(t *testing.T, store *execution.Store, pool *pgxpool.Pool, prefix string, n int) {
	t.Helper()
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			a := execution.Attempt{Tenant: "acme", Key: fmt.Sprintf("%s:%d", prefix, i), Task: "invoice.create",
				Resource: fmt.Sprintf("%s-order:%d", prefix, i), JobID: "job", Worker: "w"}
			rec, err := store.Take(ctx, a)
			if err != nil {
				errs <- err
				return
			}
			if err := store.MarkSucceeded(ctx, a.Tenant, a.Key, rec.FencingToken, "ref-"+a.Key); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		key := fmt.Sprintf("%s:%d", prefix, i)
		rec, err := store.Get(ctx, "acme", key)
		if err != nil || rec.Status != job.StatusSucceeded || rec.ResultRef != "ref-"+key {
			t.Errorf("%s: %+v %v, want succeeded with its result", key, rec, err)
			continue
		}
		entries, err := execution.Attempts(ctx, pool, "acme", key)
		if err != nil || len(entries) == 0 {
			t.Fatalf("%s: ledger %v %v", key, entries, err)
		}
		if last := entries[len(entries)-1]; last.Outcome != execution.OutcomeSucceeded || last.FencingToken != rec.FencingToken {
			t.Errorf("%s: last ledger row %+v, want succeeded under token %d", key, last, rec.FencingToken)
		}
	}
}

// TestBatchedWritesShareRoundTrips: writes that arrive while the lane is
// busy go out together, and each caller is told its own result.
func TestBatchedWritesShareRoundTrips(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	db := &countingPool{Pool: pool, firstDelay: 100 * time.Millisecond}
	store := execution.New(db, execution.WithBatching(1, 64))
	const n = 20
	runJobs(t, store, pool, "batched", n)
	trips := db.singles.Load() + db.batches.Load() - n // the Gets of the check went on their own
	if trips >= 2*n || db.batched.Load() == 0 {
		t.Errorf("%d statements took %d round trips (%d batches carrying %d), want fewer round trips than statements",
			2*n, trips, db.batches.Load(), db.batched.Load())
	}
}

// TestWithoutBatchingEveryWriteGoesAlone: lanes 0 turns batching off.
func TestWithoutBatchingEveryWriteGoesAlone(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	db := &countingPool{Pool: pool}
	runJobs(t, execution.New(db, execution.WithBatching(0, 64)), pool, "unbatched", 8)
	if b := db.batches.Load(); b != 0 {
		t.Errorf("%d batches sent with batching off", b)
	}
}

// TestFailedBatchRunsEachStatementAlone: whether a failed batch was rolled
// back or may have committed, every statement runs again on its own and
// every caller gets the answer its statement gives alone.
func TestFailedBatchRunsEachStatementAlone(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"rolled back", "committed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool := testkit.Pool(t)
			db := &countingPool{Pool: pool, firstDelay: 100 * time.Millisecond, fail: mode}
			runJobs(t, execution.New(db, execution.WithBatching(1, 64)), pool, "failed-"+mode[:4], 12)
			if db.batches.Load() == 0 {
				t.Fatal("no batch was sent: the test proves nothing")
			}
		})
	}
}

// TestBatchedWriteKeepsItsRefusal: a statement that refuses (Take of a
// succeeded job) is that caller's answer and does not fail the batch.
func TestBatchedWriteKeepsItsRefusal(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	db := &countingPool{Pool: pool, firstDelay: 100 * time.Millisecond}
	store := execution.New(db, execution.WithBatching(1, 64))
	ctx := t.Context()
	done := execution.Attempt{Tenant: "acme", Key: "refused:done", Task: "invoice.create", Resource: "refused-order"}
	rec, err := store.Take(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MarkSucceeded(ctx, "acme", done.Key, rec.FencingToken, "inv-1"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var refusals atomic.Int64
	for i := range 10 {
		wg.Go(func() {
			a := execution.Attempt{Tenant: "acme", Key: fmt.Sprintf("refused:%d", i), Task: "invoice.create", Resource: fmt.Sprintf("refused-order:%d", i)}
			if i%2 == 0 {
				a = done
			}
			_, err := store.Take(ctx, a)
			switch {
			case i%2 == 0 && errors.Is(err, execution.ErrSucceeded):
				refusals.Add(1)
			case err != nil:
				t.Errorf("Take %s: %v", a.Key, err)
			}
		})
	}
	wg.Wait()
	if refusals.Load() != 5 {
		t.Errorf("%d Takes of the succeeded job refused, want 5", refusals.Load())
	}
	if db.batches.Load() == 0 {
		t.Error("no batch was sent: the test proves nothing")
	}
}

// TestBlockedTakeGivesItsLaneBack: a take that waits for a row lock (here
// a cancel's open transaction on its job) holds up its batch only for the
// batch lock timeout; the lane then carries the other writers' takes
// while the blocked one waits on its own, and it completes once the lock
// is gone.
func TestBlockedTakeGivesItsLaneBack(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := t.Context()
	for _, id := range []string{"job-blocked", "job-free"} {
		if _, err := pool.Exec(ctx, `INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status)
VALUES ($1, 'acme', 'orders', $1, 'invoice.create', 'default', $1, '{}', 'queued')`, id); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, `SELECT 1 FROM jobs WHERE id = 'job-blocked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	store := execution.New(pool, execution.WithBatching(1, 64))
	take := func(id string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := store.Take(ctx, execution.Attempt{Tenant: "acme", Key: id, Task: "invoice.create", Resource: "order:" + id,
				JobID: id, JobRecorded: true, Worker: "w", FlushLater: true})
			done <- err
		}()
		return done
	}
	blocked := take("job-blocked")
	testkit.Eventually(t, "the blocked take to wait for the row lock", 10*time.Second, func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH job AS%')`).Scan(&waiting)
		return err == nil && waiting
	})
	select {
	case err := <-take("job-free"):
		if err != nil {
			t.Fatalf("take of the free job: %v", err)
		}
	case <-time.After(8 * time.Second):
		// The lane comes back after the batch lock timeout (1s); without
		// it, only the batch timeout (10s) would free it.
		t.Fatal("the free job's take waited behind the blocked one")
	}
	select {
	case err := <-blocked:
		t.Fatalf("the blocked take returned (%v) while its row was locked", err)
	default:
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatalf("the blocked take, once the lock was gone: %v", err)
	}
}
