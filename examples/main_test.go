package examples

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// declaredJobs reads the four jobs' declarations from JobsYAML, as the
// product's configuration would, into specs built with package job.
func declaredJobs(t testing.TB) []*job.Spec {
	t.Helper()
	var doc struct {
		Jobs []struct {
			Task        string         `yaml:"task"`
			Queue       string         `yaml:"queue"`
			BusinessKey string         `yaml:"business_key"`
			Resource    string         `yaml:"resource"`
			Schema      map[string]any `yaml:"schema"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(JobsYAML, &doc); err != nil {
		t.Fatalf("JobsYAML: %v", err)
	}
	var specs []*job.Spec
	for i, j := range doc.Jobs {
		raw, err := json.Marshal(j.Schema)
		if err != nil {
			t.Fatalf("JobsYAML jobs[%d].schema: %v", i, err)
		}
		spec, err := job.NewSpec(j.Task, raw, j.BusinessKey, j.Resource)
		if err != nil {
			t.Fatal(err)
		}
		if j.Queue != "" {
			spec.Queue = j.Queue
		}
		specs = append(specs, spec)
	}
	return specs
}

// identity is the business key and resource the declaration of task gives
// payload, unscoped.
func identity(t testing.TB, task string, payload any) (key, resource string) {
	t.Helper()
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range declaredJobs(t) {
		if spec.Task == task {
			p, err := spec.Decode(body)
			if err != nil {
				t.Fatalf("%s payload %s: %v", task, body, err)
			}
			return p.BusinessKey, p.Resource
		}
	}
	t.Fatalf("task %s is not declared in JobsYAML", task)
	return "", ""
}

// directJob is the attempt the framework would hand a handler for the
// tenant's payload, with a fresh fencing token: what a new owner of the
// resource would have. Tests that need to hold a token call handlers with
// it directly.
func directJob[T any](t *testing.T, pool *pgxpool.Pool, tenant, task string, payload T) workers.Job[T] {
	t.Helper()
	key, resource := identity(t, task, payload)
	resource = workers.Scope(tenant, resource)
	token, err := fence.Next(t.Context(), pool, resource)
	if err != nil {
		t.Fatal(err)
	}
	return workers.Job[T]{Key: key, Tenant: tenant, Resource: resource, Payload: payload, Token: token, Attempt: 1}
}

// bizEnv is one test's worker for the four example jobs, built as a user
// builds it (the declarations, Register, Handlers.Mux), on a schema of its
// own, Redis under a prefix of its own and a partner of its own.
type bizEnv struct {
	pool    *pgxpool.Pool
	rdb     *redis.Client
	prefix  string
	sim     *partnersim.Sim
	partner *httptest.Server
	// keys lists the Idempotency-Key of every call that reached the partner.
	keys    *keyLog
	mux     *asynq.ServeMux
	results *resultLog
}

// newBizEnv starts a partnersim with simOpts; adjust, if set, changes the
// configuration before the handlers are built.
func newBizEnv(t *testing.T, simOpts partnersim.Options, adjust func(*Business, *workers.Deps)) *bizEnv {
	t.Helper()
	e := &bizEnv{pool: testkit.Pool(t, tables()), rdb: testkit.Redis(t), prefix: testkit.Prefix(), keys: &keyLog{}, results: &resultLog{}}
	e.sim = partnersim.New(simOpts)
	e.partner = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.keys.add(r.Header.Get("Idempotency-Key"))
		e.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(e.partner.Close)
	deps := workers.Deps{
		DB:       e.pool,
		Redis:    e.rdb,
		Lock:     lock.Options{Prefix: e.prefix, TTL: 20 * time.Second},
		Logger:   testkit.Logger(),
		OnStatus: e.results.record,
	}
	b := Business{
		DB:          e.pool,
		Redis:       e.rdb,
		PartnerURL:  e.partner.URL,
		DedupPrefix: e.prefix,
		Logger:      testkit.Logger(),
	}
	if adjust != nil {
		adjust(&b, &deps)
	}
	hs := workers.NewHandlers()
	if err := Register(hs, b); err != nil {
		t.Fatal(err)
	}
	mux, err := hs.Mux(deps, declaredJobs(t), workers.HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	e.mux = mux
	return e
}

// task is the task the gateway would enqueue for tenant's payload.
func task(t *testing.T, tenant, kind string, payload any) *asynq.Task {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{job.HeaderID: fmt.Sprintf("job-%016x", rand.Uint64())}
	if tenant != "" {
		headers[job.HeaderTenant] = tenant
	}
	return asynq.NewTaskWithHeaders(kind, b, headers)
}

// deliver delivers tk once, as asynq would.
func (e *bizEnv) deliver(t *testing.T, tk *asynq.Task) error {
	t.Helper()
	return e.mux.ProcessTask(t.Context(), tk)
}

// exec returns the execution record of tenant's business key.
func (e *bizEnv) exec(t *testing.T, tenant, key string) execution.State {
	t.Helper()
	return execOf(t, e.pool, tenant, key)
}

func execOf(t *testing.T, pool *pgxpool.Pool, tenant, key string) execution.State {
	t.Helper()
	rec, err := execution.New(pool).Get(t.Context(), tenant, key)
	if err != nil {
		t.Fatalf("execution of %s: %v", workers.Scope(tenant, key), err)
	}
	return rec
}

// keyLog keeps the Idempotency-Keys the partner was sent.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) add(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, key)
}

// distinct returns the keys sent, each once, sorted.
func (l *keyLog) distinct() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Compact(slices.Sorted(slices.Values(l.keys)))
}

// resultLog keeps the result_ref each succeeded delivery reported, by
// tenant-scoped key.
type resultLog struct {
	mu   sync.Mutex
	refs map[string][]string
}

func (l *resultLog) record(_ context.Context, task *asynq.Task, key string, status job.Status, _ int, resultRef, _ string) error {
	if status != job.StatusSucceeded {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == nil {
		l.refs = map[string][]string{}
	}
	scoped := workers.Scope(task.Headers()[job.HeaderTenant], key)
	l.refs[scoped] = append(l.refs[scoped], resultRef)
	return nil
}

func (l *resultLog) of(tenant, key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.refs[workers.Scope(tenant, key)])
}

// untilAcked delivers task until it is acked, as asynq would after each
// retryable error, and returns the errors met on the way. A permanent
// error fails the test.
func untilAcked(t *testing.T, h asynq.Handler, task *asynq.Task) []error {
	t.Helper()
	var errs []error
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := h.ProcessTask(t.Context(), task)
		if err == nil {
			return errs
		}
		if workers.IsPermanent(err) || errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("delivery failed for good: %v", err)
		}
		errs = append(errs, err)
		if time.Now().After(deadline) {
			t.Fatalf("task still not acked after %d deliveries: %v", len(errs), err)
		}
		time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
	}
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
		if workers.IsFailure(err) {
			t.Errorf("delivery failed: %v", err)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("task still not done: %v", err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// seededRand is a deterministic partnersim.Options.Rand, safe for the
// partner's concurrent handlers.
func seededRand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// strings1 queries one text column.
func strings1(t *testing.T, pool *pgxpool.Pool, query string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}
