package workers

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// failingRecords is a DB whose statements that record a success fail
// while fails is above zero, one failure each, as a database in the
// middle of a failover answers; everything else goes through.
type failingRecords struct {
	DB
	fails atomic.Int64
}

var errStoreDown = errors.New("connection reset by peer (simulated)")

func (f *failingRecords) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "status = 'succeeded', result_ref") && f.fails.Add(-1) >= 0 {
		return errRow{errStoreDown}
	}
	return f.DB.QueryRow(ctx, sql, args...)
}

func (f *failingRecords) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return f.DB.Exec(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// A success whose record fails a few times is recorded by retrying the
// record: the effect is applied once, in one delivery, and the job ends
// succeeded, its document too.
func TestRecordRetriedNotTheEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var st statuses
	var calls atomic.Int64
	db := &failingRecords{DB: e.pool}
	db.fails.Store(3)
	deps := e.deps(obs, 5*time.Second)
	deps.DB = db
	deps.OnStatus = st.fn
	h := Handle(deps, kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))

	if err := h.ProcessTask(t.Context(), newTask(t, "r1")); err != nil {
		t.Fatalf("delivery: %v (the record's failures must not send the task back)", err)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("business function ran %d times, want 1", got)
	}
	if effects := e.effects(t, "effect:r1"); len(effects) != 1 {
		t.Fatalf("effects = %+v, want one", effects)
	}
	rec := e.record(t, "effect:r1")
	if rec.Status != job.StatusSucceeded || rec.Attempts != 1 {
		t.Fatalf("record = %+v, want succeeded at attempt 1", rec)
	}
	if got := obs.count("record:retried"); got != 3 {
		t.Fatalf("record retries counted = %d, want 3", got)
	}
	if got := obs.count("attempt:transient"); got != 0 {
		t.Fatalf("transient attempts = %d, want 0: the attempt itself did not fail", got)
	}
	if got := st.list(); len(got) != 2 || !strings.Contains(got[1], "succeeded") {
		t.Fatalf("statuses = %q, want processing then succeeded", got)
	}
}

// A store that stays down past the bound (a few lock TTLs) ends the
// attempt as before: an error that retries the task, never a failure,
// the job still processing.
func TestRecordGivesUpAfterTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	db := &failingRecords{DB: e.pool}
	db.fails.Store(1 << 40)
	deps := e.deps(obs, 200*time.Millisecond)
	deps.DB = db
	var calls atomic.Int64
	h := Handle(deps, kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))
	err := h.ProcessTask(t.Context(), newTask(t, "r3"))
	if err == nil || errors.Is(err, asynq.SkipRetry) || !errors.Is(err, errStoreDown) {
		t.Fatalf("ProcessTask = %v, want a retryable error wrapping the store's", err)
	}
	if obs.count("record:retried") == 0 || obs.count("attempt:transient") != 1 {
		t.Fatalf("observer = %v, want record retries then one transient attempt", obs.counts)
	}
	if rec := e.record(t, "effect:r3"); rec.Status != job.StatusProcessing {
		t.Fatalf("record = %+v, want processing", rec)
	}
}

// A lost lease ends the record's retries: another worker may own the job.
func TestRecordStopsWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	db := &failingRecords{DB: e.pool}
	db.fails.Store(1 << 40)
	deps := e.deps(obs, 3*time.Second)
	deps.DB = db
	var calls atomic.Int64
	effect := plainEffect(e.pool, "A", &calls)
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		ref, err := effect(ctx, j)
		go func() {
			time.Sleep(300 * time.Millisecond)
			_ = e.rdb.Del(context.Background(), e.lockKey("r4")).Err()
		}()
		return ref, err
	})
	err := h.ProcessTask(t.Context(), newTask(t, "r4"))
	var lost *OwnershipLostError
	if !errors.As(err, &lost) {
		t.Fatalf("ProcessTask = %v, want *OwnershipLostError", err)
	}
}

// The success is recorded through a PostgreSQL that is cut off for about
// a second right after the effect: one delivery, one effect, succeeded.
func TestRecordSurvivesADatabaseCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxied, proxy := testkit.ProxiedPool(t, e.pool.Config().ConnString(), nil)
	var cut sync.WaitGroup
	t.Cleanup(cut.Wait) // before the pool and the proxy close

	obs := newRecorder()
	deps := e.deps(obs, 2*time.Second)
	deps.DB = proxied
	var calls atomic.Int64
	effect := plainEffect(e.pool, "A", &calls) // the business data stays reachable
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		ref, err := effect(ctx, j)
		// The worker's database goes away for a second: every
		// connection is dropped as it is opened, then it comes back.
		proxy.Freeze()
		proxy.CloseConns()
		cut.Go(func() {
			for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				proxy.CloseConns()
			}
			proxy.Thaw()
		})
		return ref, err
	})
	if err := h.ProcessTask(t.Context(), newTask(t, "r5")); err != nil {
		t.Fatalf("delivery: %v", err)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("business function ran %d times, want 1", got)
	}
	if effects := e.effects(t, "effect:r5"); len(effects) != 1 {
		t.Fatalf("effects = %+v, want one", effects)
	}
	if rec := e.record(t, "effect:r5"); rec.Status != job.StatusSucceeded {
		t.Fatalf("record = %+v, want succeeded", rec)
	}
	if obs.count("record:retried") == 0 {
		t.Fatal("the record never failed: the cut did not happen during it")
	}
}
