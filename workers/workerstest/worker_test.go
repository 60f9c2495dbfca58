package workerstest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/workerstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// order is the test jobs' payload.
type order struct {
	OrderID string `json:"order_id"`
}

func orderKey(o order) string      { return "effect:" + o.OrderID }
func orderResource(o order) string { return "order:" + o.OrderID }

// newPool is a migrated schema of the test's own with an effects table,
// where the test functions write.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testkit.Pool(t)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE effects (
    id      bigserial PRIMARY KEY,
    tenant  text   NOT NULL,
    job_key text   NOT NULL,
    token   bigint NOT NULL
)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func newWorker(t *testing.T, pool *pgxpool.Pool, fn workers.Func[order], opts ...workerstest.Option) *workerstest.Worker[order] {
	t.Helper()
	opts = append([]workerstest.Option{workerstest.DB(pool), workerstest.Redis(testkit.Redis(t))}, opts...)
	return workerstest.NewWorker(t, "effect.apply", orderKey, orderResource, fn, opts...)
}

func effects(t *testing.T, pool *pgxpool.Pool, tenant, key string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM effects WHERE tenant = $1 AND job_key = $2`, tenant, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// idempotentEffect is a business function done right: its write is fenced
// and it returns the existing effect instead of writing it again.
func idempotentEffect(pool *pgxpool.Pool) workers.Func[order] {
	return func(ctx context.Context, job workers.Job[order]) (string, error) {
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := job.CheckFence(ctx, tx); err != nil {
				return err
			}
			err := tx.QueryRow(ctx, `SELECT id FROM effects WHERE tenant = $1 AND job_key = $2`, job.Tenant, job.Key).Scan(&id)
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return tx.QueryRow(ctx, `INSERT INTO effects (tenant, job_key, token) VALUES ($1, $2, $3) RETURNING id`,
				job.Tenant, job.Key, job.Token).Scan(&id)
		})
		return fmt.Sprintf("effect-%d", id), err
	}
}

// blindEffect is the function a Worker must catch: no fence, no check for
// an earlier effect.
func blindEffect(pool *pgxpool.Pool) workers.Func[order] {
	return func(ctx context.Context, job workers.Job[order]) (string, error) {
		var id int64
		err := pool.QueryRow(ctx, `INSERT INTO effects (tenant, job_key, token) VALUES ($1, $2, $3) RETURNING id`,
			job.Tenant, job.Key, job.Token).Scan(&id)
		return fmt.Sprintf("effect-%d", id), err
	}
}

func TestWorkThenReplay(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	w := newWorker(t, pool, idempotentEffect(pool))
	first := w.Work(t, order{OrderID: "o-1"})
	if first.Err != nil || !first.Ran || first.Replayed || first.Class != "" || first.Status != job.StatusSucceeded {
		t.Fatalf("first delivery = %+v, want the function run and the job succeeded", first)
	}
	if j := first.Job; j.Key != "effect:o-1" || j.Tenant != w.Tenant() || j.Resource != w.Tenant()+"/order:o-1" ||
		j.Token < 1 || j.Attempt != 1 || j.Payload.OrderID != "o-1" {
		t.Errorf("the function received %+v", j)
	}
	again := w.Work(t, order{OrderID: "o-1"})
	if again.Err != nil || again.Ran || !again.Replayed || again.Status != job.StatusSucceeded || again.ResultRef != first.ResultRef {
		t.Errorf("second delivery = %+v, want a replay of %q without running the function", again, first.ResultRef)
	}
	if n := effects(t, pool, w.Tenant(), "effect:o-1"); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

// TestWorkUnrecorded: the run after a lost outcome gets a higher token; an
// idempotent function writes nothing new, a blind one writes twice — which
// is what a user's test must be able to see.
func TestWorkUnrecorded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fn      func(*pgxpool.Pool) workers.Func[order]
		effects int
	}{
		{"idempotent", idempotentEffect, 1},
		{"blind", blindEffect, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			w := newWorker(t, pool, tc.fn(pool))
			lost := w.WorkUnrecorded(t, order{OrderID: "o-1"})
			if !lost.Ran || lost.Class != workers.ClassTransient || lost.Status != job.StatusRetrying || !workers.IsFailure(lost.Err) {
				t.Fatalf("delivery that lost its outcome = %+v, want a transient failure, the job retrying", lost)
			}
			retry := w.Work(t, order{OrderID: "o-1"})
			if retry.Err != nil || !retry.Ran || retry.Status != job.StatusSucceeded {
				t.Fatalf("retry = %+v, want the function run again and the job succeeded", retry)
			}
			if retry.Job.Token <= lost.Job.Token || retry.Job.Attempt != 2 {
				t.Errorf("retry ran under token %d, attempt %d; want more than %d, attempt 2", retry.Job.Token, retry.Job.Attempt, lost.Job.Token)
			}
			if n := effects(t, pool, w.Tenant(), "effect:o-1"); n != tc.effects {
				t.Errorf("%d effects, want %d", n, tc.effects)
			}
			if tc.effects == 1 && retry.ResultRef != lost.ResultRef {
				t.Errorf("retry returned %q, want the first run's %q", retry.ResultRef, lost.ResultRef)
			}
		})
	}
}

// TestWorkStale: a fenced write under a superseded token is refused and
// the job left to its newer owner; a function without a fence writes.
func TestWorkStale(t *testing.T) {
	t.Parallel()
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		w := newWorker(t, pool, idempotentEffect(pool))
		stale := w.WorkStale(t, order{OrderID: "o-1"})
		var lost *workers.OwnershipLostError
		if !stale.Ran || stale.Class != workers.ClassStaleToken || !errors.As(stale.Err, &lost) || stale.Status != job.StatusProcessing {
			t.Fatalf("stale delivery = %+v, want the write refused for a newer owner", stale)
		}
		if n := effects(t, pool, w.Tenant(), "effect:o-1"); n != 0 {
			t.Fatalf("%d effects after a refused write, want 0", n)
		}
		next := w.Work(t, order{OrderID: "o-1"})
		if next.Err != nil || next.Status != job.StatusSucceeded || next.Job.Token <= stale.Job.Token+1 {
			t.Errorf("next delivery = %+v, want success above the newer owner's token %d", next, stale.Job.Token+1)
		}
	})
	t.Run("unfenced", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		w := newWorker(t, pool, blindEffect(pool))
		if got := w.WorkStale(t, order{OrderID: "o-1"}); got.Class != "" || got.Status != job.StatusSucceeded {
			t.Errorf("stale delivery of an unfenced function = %+v, want it to write and succeed", got)
		}
	})
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	failing := func(err error) workers.Func[order] {
		return func(context.Context, workers.Job[order]) (string, error) { return "", err }
	}
	for _, tc := range []struct {
		name   string
		err    error
		opts   []workerstest.Option
		class  string
		status job.Status
	}{
		{"transient", errors.New("partner answered 500"), nil, workers.ClassTransient, job.StatusRetrying},
		{"unavailable", workers.Unavailable(errors.New("partner answered 503")), nil, workers.ClassUnavailable, job.StatusRetrying},
		{"permanent", workers.Permanent(errors.New("card declined")), nil, workers.ClassPermanent, job.StatusFailed},
		{"last attempt", errors.New("partner answered 500"), []workerstest.Option{workerstest.MaxAttempts(1)}, workers.ClassTransient, job.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := newWorker(t, pool, failing(tc.err), tc.opts...).Work(t, order{OrderID: "o-1"})
			if !got.Ran || got.Class != tc.class || got.Status != tc.status || !errors.Is(got.Err, tc.err) {
				t.Errorf("%+v, want class %s, status %s, the function's error", got, tc.class, tc.status)
			}
		})
	}
}

// TestTenants: Workers share nothing by default; Tenant("") runs jobs
// without a tenant, on the bare resource.
func TestTenants(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a, b := newWorker(t, pool, idempotentEffect(pool)), newWorker(t, pool, idempotentEffect(pool))
	if ra, rb := a.Work(t, order{OrderID: "o-1"}), b.Work(t, order{OrderID: "o-1"}); !ra.Ran || !rb.Ran || a.Tenant() == b.Tenant() {
		t.Errorf("two Workers, one payload: %+v and %+v; want both run, as tenants %q and %q", ra, rb, a.Tenant(), b.Tenant())
	}
	none := newWorker(t, pool, idempotentEffect(pool), workerstest.Tenant(""))
	if got := none.Work(t, order{OrderID: "o-2"}); got.Job.Tenant != "" || got.Job.Resource != "order:o-2" {
		t.Errorf("job without a tenant ran as %+v", got.Job)
	}
}

// TestDefaultsFromEnvironment: without DB and Redis, a Worker opens
// TEST_DATABASE_URL and TEST_REDIS_URL.
func TestDefaultsFromEnvironment(t *testing.T) {
	testkit.RedisURL(t)
	t.Setenv("TEST_DATABASE_URL", testkit.Postgres(t))
	w := workerstest.NewWorker(t, "effect.apply", orderKey, orderResource, func(context.Context, workers.Job[order]) (string, error) {
		return "done", nil
	})
	if got := w.Work(t, order{OrderID: "o-1"}); got.Err != nil || got.ResultRef != "done" {
		t.Errorf("%+v, want done", got)
	}
}

// fatalTB records a test's Fatalf instead of failing it.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	pool := testkit.PoolAt(t, testkit.EmptySchema(t))
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		workerstest.NewWorker(tb, "effect.apply", orderKey, orderResource, blindEffect(pool),
			workerstest.DB(pool), workerstest.Redis(testkit.Redis(t)))
	}()
	<-done
	if !strings.Contains(tb.msg, "job_executions") || !strings.Contains(tb.msg, "idemgate migrate up") {
		t.Errorf("NewWorker on an empty schema: %q, want the missing tables and how to create them", tb.msg)
	}
}

// TestExample runs the example's test body.
func TestExample(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE customer_invoices (
    id           text PRIMARY KEY DEFAULT 'inv_' || md5(random()::text),
    tenant       text   NOT NULL,
    order_id     text   NOT NULL,
    amount_cents bigint NOT NULL,
    UNIQUE (tenant, order_id)
)`); err != nil {
		t.Fatal(err)
	}
	testCreateInvoice(t, pool)
}
