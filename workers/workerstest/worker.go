package workerstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

// Worker runs one business function as the worker framework does. Build
// it with NewWorker; its methods run one delivery each, one at a time.
type Worker[T any] struct {
	kind          string
	key, resource func(T) string
	fn            workers.Func[T]
	deps          workers.Deps
	tenant        string
}

// Option adjusts a Worker.
type Option func(*settings)

type settings struct {
	db          workers.DB
	redis       lock.Client
	tenant      string
	tenantSet   bool
	maxAttempts int
}

// DB keeps the framework's state in db, whose database (or search_path
// schema) has idemgate's migrations applied. Default: a pool on
// TEST_DATABASE_URL, closed when the test ends.
func DB(db workers.DB) Option { return func(s *settings) { s.db = db } }

// Redis takes the resource locks on client. Default: a client on
// TEST_REDIS_URL, closed when the test ends.
func Redis(client lock.Client) Option { return func(s *settings) { s.redis = client } }

// Tenant submits the Worker's jobs as tenant ("" for jobs without one).
// Default: a random name, so nothing is shared with another Worker.
func Tenant(name string) Option {
	return func(s *settings) { s.tenant, s.tenantSet = name, true }
}

// MaxAttempts is how many real attempts a job gets before it fails.
// Default workers.DefaultMaxAttempts.
func MaxAttempts(n int) Option { return func(s *settings) { s.maxAttempts = n } }

// NewWorker returns a Worker for fn, the business function of the task
// kind, whose business key and resource are key(payload) and
// resource(payload), as workers.Handle takes them. It fails the test when
// the database lacks the framework's tables, and skips it when it needs
// TEST_DATABASE_URL or TEST_REDIS_URL and the variable is unset.
func NewWorker[T any](t testing.TB, kind string, key, resource func(T) string, fn workers.Func[T], opts ...Option) *Worker[T] {
	t.Helper()
	var s settings
	for _, opt := range opts {
		opt(&s)
	}
	if !s.tenantSet {
		s.tenant = "test-" + random()
	}
	if s.db == nil {
		s.db = openDB(t)
	}
	if s.redis == nil {
		s.redis = openRedis(t)
	}
	checkSchema(t, s.db)
	w := &Worker[T]{
		kind: kind, key: key, resource: resource, fn: fn, tenant: s.tenant,
		deps: workers.Deps{
			DB:          s.db,
			Redis:       s.redis,
			Lock:        lock.Options{Prefix: "workerstest:" + random() + ":"},
			MaxAttempts: s.maxAttempts,
		},
	}
	// Handle's own checks (a missing kind, key, resource or function),
	// now rather than at the first Work.
	workers.Handle(w.deps, kind, key, resource, fn)
	return w
}

// Tenant is the tenant the Worker submits its jobs as.
func (w *Worker[T]) Tenant() string { return w.tenant }

// Result is what one delivery did.
type Result[T any] struct {
	// Err is what the handler returned to the queue: nil when the job
	// succeeded or was replayed. workers.IsFailure(Err) says whether asynq
	// would count it as a failure.
	Err error
	// Class is the attempt's error class (workers.ClassTransient,
	// ClassPermanent, ClassUnavailable, ClassLockBusy, ClassStaleToken);
	// "" when it succeeded or was replayed.
	Class string
	// Status is the job's status the delivery last reported
	// (job.StatusSucceeded, StatusRetrying, StatusFailed, or
	// StatusProcessing when the attempt lost the job to a newer owner and
	// left the verdict to it); "" when it reported none (a busy lock).
	Status job.Status
	// Ran says whether the business function ran; Replayed that the job
	// had already succeeded and was acked without running it.
	Ran, Replayed bool
	// ResultRef is the function's result, or for a replay the result the
	// run that succeeded recorded.
	ResultRef string
	// Job is what the function received: its business key, tenant,
	// resource (scoped to the tenant), fencing token and attempt number.
	// The zero Job when it did not run.
	Job workers.Job[T]
}

// Work delivers payload once, as the queue would.
func (w *Worker[T]) Work(t testing.TB, payload T) Result[T] {
	t.Helper()
	return w.deliver(t, payload, nil, nil)
}

// errDied is what a delivery run by WorkUnrecorded returns in place of the
// function's success.
var errDied = errors.New("workerstest: the worker died before recording the outcome (simulated)")

// WorkUnrecorded delivers payload and runs the function, then loses its
// outcome, as a worker that dies between the effect and recording it
// would: the job is left to be retried (Status retrying, Class transient;
// the attempt counts), and the next Work runs the function again under a
// higher fencing token. A function whose effect is idempotent per key
// returns the first run's result then and writes nothing new.
func (w *Worker[T]) WorkUnrecorded(t testing.TB, payload T) Result[T] {
	t.Helper()
	return w.deliver(t, payload, nil, func(ref string, err error) (string, error) {
		if err != nil {
			return ref, err
		}
		return ref, errDied
	})
}

// WorkStale delivers payload, but just before the function runs a newer
// owner takes the job's resource and writes: it draws the next fencing
// token and the fence accepts it (fence.Next, fence.Check), as when this
// worker paused past its lease and another took over. The function's
// fenced write must be refused: Class workers.ClassStaleToken, Err a
// *workers.OwnershipLostError, and nothing written. The job stays
// processing for the newer owner; a later Work runs it again.
func (w *Worker[T]) WorkStale(t testing.TB, payload T) Result[T] {
	t.Helper()
	return w.deliver(t, payload, func(ctx context.Context, job workers.Job[T]) error {
		newer, err := fence.Next(ctx, w.deps.DB, job.Resource)
		if err != nil {
			return err
		}
		return fence.Check(ctx, w.deps.DB, job.Resource, newer)
	}, nil)
}

// deliver runs one delivery of payload through the framework's handler.
// before runs ahead of the function and after may replace what it
// returned; an error of before fails the test once the delivery is over
// (the handler holds a lease until then).
func (w *Worker[T]) deliver(t testing.TB, payload T, before func(context.Context, workers.Job[T]) error,
	after func(string, error) (string, error)) Result[T] {
	t.Helper()
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatalf("workerstest: payload: %v", err)
	}
	var (
		res       Result[T]
		beforeErr error
	)
	obs := &observer{}
	deps := w.deps
	deps.Observer = obs
	deps.OnStatus = func(_ context.Context, _ *asynq.Task, _ string, status job.Status, _ int, resultRef, _ string) error {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		obs.status, obs.resultRef = status, resultRef
		return nil
	}
	fn := func(ctx context.Context, j workers.Job[T]) (string, error) {
		res.Ran, res.Job = true, j
		if before != nil {
			if beforeErr = before(ctx, j); beforeErr != nil {
				return "", workers.Permanent(beforeErr)
			}
		}
		ref, err := w.fn(ctx, j)
		res.ResultRef = ref
		if after != nil {
			ref, err = after(ref, err)
		}
		return ref, err
	}
	task := asynq.NewTaskWithHeaders(w.kind, body, map[string]string{
		job.HeaderTenant: w.tenant,
		job.HeaderID:     "workerstest-" + random(),
	})
	res.Err = workers.Handle(deps, w.kind, w.key, w.resource, fn).ProcessTask(t.Context(), task)
	if beforeErr != nil {
		t.Fatalf("workerstest: the newer owner's write: %v", beforeErr)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	res.Class, res.Status, res.Replayed = obs.class, obs.status, obs.replayed
	if res.Replayed {
		res.ResultRef = obs.resultRef
	}
	return res
}

// observer keeps what one delivery reported.
type observer struct {
	workers.NopObserver
	mu        sync.Mutex
	class     string
	replayed  bool
	status    job.Status
	resultRef string
}

func (o *observer) Attempt(_, class string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.class = class
}

func (o *observer) JobReplay(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.replayed = true
}

// tables are the framework's, which the database must hold.
var tables = []string{"job_executions", "job_attempts", "fencing_tokens", "fence_accepted"}

// checkSchema fails the test when db lacks one of the framework's tables.
func checkSchema(t testing.TB, db workers.DB) {
	t.Helper()
	var missing []string
	err := db.QueryRow(t.Context(), `SELECT coalesce(array_agg(name), '{}') FROM unnest($1::text[]) AS name WHERE to_regclass(name) IS NULL`,
		tables).Scan(&missing)
	switch {
	case err != nil:
		t.Fatalf("workerstest: database: %v", err)
	case len(missing) > 0:
		t.Fatalf("workerstest: the database has no %v: apply idemgate's migrations to it (idemgate migrate up)", missing)
	}
}

func openDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), env(t, "TEST_DATABASE_URL"))
	if err != nil {
		t.Fatalf("workerstest: TEST_DATABASE_URL: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openRedis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(env(t, "TEST_REDIS_URL"))
	if err != nil {
		t.Fatalf("workerstest: TEST_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// env returns the variable name or skips the test.
func env(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s not set: skipping a test that runs a worker", name)
	}
	return v
}

func random() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
