package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const kind = "effect.apply"

// order is the test tasks' payload.
type order struct {
	OrderID string `json:"order_id"`
}

// orderKey and orderResource derive nothing from a payload without an
// order id, which makes the task unprocessable.
func orderKey(o order) string {
	if o.OrderID == "" {
		return ""
	}
	return "effect:" + o.OrderID
}

func orderResource(o order) string {
	if o.OrderID == "" {
		return ""
	}
	return "order:" + o.OrderID
}

func newTask(t *testing.T, orderID string) *asynq.Task {
	t.Helper()
	b, err := json.Marshal(order{OrderID: orderID})
	if err != nil {
		t.Fatal(err)
	}
	return asynq.NewTask(kind, b)
}

// env is one test's services: a PostgreSQL schema with an effects table of
// its own, Redis, and a lock key prefix nobody else uses.
type env struct {
	pool   *pgxpool.Pool
	rdb    *redis.Client
	prefix string
	store  *execution.Store
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{pool: testkit.Pool(t), rdb: testkit.Redis(t), prefix: testkit.Prefix()}
	e.store = execution.New(e.pool)
	if _, err := e.pool.Exec(t.Context(), effectsTable); err != nil {
		t.Fatal(err)
	}
	return e
}

// effectsTable holds the test business functions' effects, one row per
// write: no unique key, so that an effect applied twice shows as two rows.
const effectsTable = `
CREATE TABLE effects (
    id       bigserial PRIMARY KEY,
    job_key  text   NOT NULL,
    resource text   NOT NULL,
    token    bigint NOT NULL,
    worker   text   NOT NULL
)`

// deps is a worker's dependencies; each worker of a test gets its own, as
// separate processes would.
func (e *env) deps(obs Observer, ttl time.Duration) Deps {
	return Deps{
		DB:       e.pool,
		Redis:    e.rdb,
		Lock:     lock.Options{Prefix: e.prefix, TTL: ttl},
		Logger:   testkit.Logger(),
		Observer: obs,
	}
}

// orderSchema is the schema of the test tasks' payload, order.
var orderSchema = []byte(`{"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}}`)

// orderSpec declares the test task kind on queue, keyed and serialised
// by its order id, as orderKey and orderResource derive them.
func orderSpec(t *testing.T, queue string) *job.Spec {
	t.Helper()
	spec, err := job.NewSpec(kind, orderSchema, "effect:{order_id}", "order:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	spec.Queue = queue
	return spec
}

// submitJob records a job of tenant for order id in status as the
// gateway would (its jobs row) and returns its id and task.
func (e *env) submitJob(t *testing.T, tenant, orderID string, status job.Status) (string, *asynq.Task) {
	t.Helper()
	id := "job_" + strings.ReplaceAll(testkit.Prefix(), ":", "") + orderID
	payload, _ := json.Marshal(order{OrderID: orderID})
	_, err := e.pool.Exec(t.Context(), `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, not_before)
VALUES ($1, $2, 'orders', $1, $3, 'default', $4, $5, $6, CASE WHEN $6 = 'scheduled' THEN now() + interval '1 hour' END)`,
		id, tenant, kind, "effect:"+orderID, payload, string(status))
	if err != nil {
		t.Fatal(err)
	}
	return id, asynq.NewTaskWithHeaders(kind, payload, map[string]string{job.HeaderID: id, job.HeaderTenant: tenant})
}

func (e *env) lockKey(orderID string) string { return e.prefix + "lock:{order:" + orderID + "}" }

// holdLock takes the lock on resource as another worker would, so a
// delivery of a job on it finds the resource busy.
func (e *env) holdLock(t *testing.T, resource string) *lock.Lease {
	t.Helper()
	other, err := lock.New(e.rdb, lock.Options{Prefix: e.prefix, TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.Acquire(t.Context(), resource)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

type effect struct {
	ID     int64
	Token  int64
	Worker string
}

func (e *env) effects(t *testing.T, jobKey string) []effect {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `SELECT id, token, worker FROM effects WHERE job_key = $1 ORDER BY id`, jobKey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[effect])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (e *env) record(t *testing.T, key string) execution.State {
	t.Helper()
	return e.recordOf(t, "", key)
}

// recordOf is the execution record of tenant's job key.
func (e *env) recordOf(t *testing.T, tenant, key string) execution.State {
	t.Helper()
	rec, err := e.store.Get(t.Context(), tenant, key)
	if err != nil {
		t.Fatalf("execution record of %s/%s: %v", tenant, key, err)
	}
	return rec
}

// plainEffect writes one effect row per call, fenced but not deduplicated:
// a test using it shows that the framework alone keeps the effect single.
func plainEffect(pool *pgxpool.Pool, worker string, calls *atomic.Int64) Func[order] {
	return func(ctx context.Context, job Job[order]) (string, error) {
		calls.Add(1)
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `INSERT INTO effects (job_key, resource, token, worker) VALUES ($1, $2, $3, $4) RETURNING id`,
				job.Key, job.Resource, job.Token, worker).Scan(&id)
		})
		return fmt.Sprintf("effect-%d", id), err
	}
}

// idempotentEffect is the pattern a business function follows: inside the
// fenced transaction (the fence row lock serialises it per resource) it
// returns the existing effect instead of applying it again.
func idempotentEffect(ctx context.Context, pool *pgxpool.Pool, job Job[order], worker string) (string, error) {
	var id int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT id FROM effects WHERE job_key = $1`, job.Key).Scan(&id)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO effects (job_key, resource, token, worker) VALUES ($1, $2, $3, $4) RETURNING id`,
			job.Key, job.Resource, job.Token, worker).Scan(&id)
	})
	return fmt.Sprintf("effect-%d", id), err
}

// recorder is an Observer that counts events by name.
type recorder struct {
	mu     sync.Mutex
	counts map[string]int
}

func newRecorder() *recorder { return &recorder{counts: map[string]int{}} }

func (r *recorder) inc(name string) {
	r.mu.Lock()
	r.counts[name]++
	r.mu.Unlock()
}

func (r *recorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[name]
}

func (r *recorder) LockAcquire(result string)              { r.inc("lock:" + result) }
func (r *recorder) LockRenewed()                           { r.inc("lock:renewed") }
func (r *recorder) LockLost()                              { r.inc("lock:lost") }
func (r *recorder) FencingRejected()                       { r.inc("fencing:rejected") }
func (r *recorder) Attempt(task, class string)             { r.inc("attempt:" + class) }
func (r *recorder) JobReplay(task string)                  { r.inc("replay") }
func (r *recorder) RecordRetried(task string)              { r.inc("record:retried") }
func (r *recorder) JobFinished(task string, st job.Status) { r.inc("finished:" + string(st)) }

// statuses records what a StatusFunc is told.
type statuses struct {
	mu  sync.Mutex
	got []string
}

func (s *statuses) fn(_ context.Context, _ *asynq.Task, key string, status job.Status, attempts int, resultRef, lastErr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, fmt.Sprintf("%s %s #%d %s", key, status, attempts, resultRef))
	return nil
}

func (s *statuses) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

// deliverUntilDone delivers task to h until it is acked, as asynq would
// after each busy lock or lost ownership, and fails on any other error.
func deliverUntilDone(t *testing.T, h asynq.Handler, task *asynq.Task) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := h.ProcessTask(t.Context(), task)
		if err == nil {
			return
		}
		if IsFailure(err) {
			t.Fatalf("delivery failed: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still not done: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
