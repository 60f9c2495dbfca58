package workers

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// shipment is a declared job's payload; its key and resource come from the
// declaration's templates.
type shipment struct {
	OrderID  string `json:"order_id"`
	Quantity int    `json:"quantity"`
}

func shipmentSpec(t *testing.T) *job.Spec {
	t.Helper()
	spec, err := job.NewSpec(kind, []byte(`{
  "type": "object", "additionalProperties": false,
  "required": ["order_id", "quantity"],
  "properties": {"order_id": {"type": "string", "minLength": 1}, "quantity": {"type": "integer", "minimum": 1}}
}`), "effect:{order_id}", "order:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func tenantTask(t *testing.T, tenant, payload string) *asynq.Task {
	t.Helper()
	return asynq.NewTaskWithHeaders(kind, []byte(payload), map[string]string{"tenant": tenant, "job_id": "job-" + tenant})
}

// shipmentMux registers a Go handler that writes one fenced effect per
// call, and builds the mux of the declared job.
func shipmentMux(t *testing.T, e *env, deps Deps, calls *atomic.Int64) *asynq.ServeMux {
	t.Helper()
	hs := NewHandlers()
	Add(hs, kind, func(ctx context.Context, j Job[shipment]) (string, error) {
		calls.Add(1)
		if j.Payload.Quantity < 1 {
			return "", errors.New("the schema should have refused this payload")
		}
		return idempotentEffect(ctx, e.pool, Job[order]{Key: j.Tenant + "|" + j.Key, Resource: j.Resource, Token: j.Token}, "A")
	})
	mux, err := hs.Mux(deps, []*job.Spec{shipmentSpec(t)}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	return mux
}

// TestTenantsAreTwoBusinesses: the same business fields from two tenants
// are two jobs: two effects, two locks, two fences.
func TestTenantsAreTwoBusinesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int64
	mux := shipmentMux(t, e, e.deps(nil, 5*time.Second), &calls)
	const payload = `{"order_id": "o-1", "quantity": 2}`
	for _, tenant := range []string{"acme", "globex", "acme"} {
		if err := mux.ProcessTask(t.Context(), tenantTask(t, tenant, payload)); err != nil {
			t.Fatalf("%s: %v", tenant, err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("business function ran %d times, want 2 (once per tenant; acme's second delivery is a replay)", n)
	}
	for _, tenant := range []string{"acme", "globex"} {
		effects := e.effects(t, tenant+"|effect:o-1")
		if len(effects) != 1 {
			t.Fatalf("%s's effects: %+v, want exactly one", tenant, effects)
		}
		rec, err := e.store.Get(t.Context(), tenant, "effect:o-1")
		if err != nil || rec.Status != "succeeded" || rec.Resource != tenant+"/order:o-1" {
			t.Fatalf("%s's record: %+v %v, want succeeded on its own scoped resource", tenant, rec, err)
		}
	}
}

// TestConflictingPayload: a second job for a business key that succeeded
// with other data fails as a conflict, permanently, and the first job's
// effect and result stand.
func TestConflictingPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int64
	deps := e.deps(nil, 5*time.Second)
	st := &statuses{}
	deps.OnStatus = st.fn
	mux := shipmentMux(t, e, deps, &calls)
	if err := mux.ProcessTask(t.Context(), tenantTask(t, "acme", `{"order_id": "o-2", "quantity": 2}`)); err != nil {
		t.Fatal(err)
	}
	// The same fields in another order and spacing are the same payload.
	if err := mux.ProcessTask(t.Context(), tenantTask(t, "acme", `{"quantity":2,"order_id":"o-2"}`)); err != nil {
		t.Fatalf("the same payload reformatted: %v, want a replay", err)
	}
	err := mux.ProcessTask(t.Context(), tenantTask(t, "acme", `{"order_id": "o-2", "quantity": 5}`))
	var conflict *ConflictError
	if !errors.As(err, &conflict) || !IsPermanent(err) || !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("another payload for a succeeded key: %v, want a permanent *ConflictError that archives the task", err)
	}
	if calls.Load() != 1 || len(e.effects(t, "acme|effect:o-2")) != 1 {
		t.Fatalf("%d calls, effects %+v: the conflict must not run the business function", calls.Load(), e.effects(t, "acme|effect:o-2"))
	}
	got := st.list()
	if last := got[len(got)-1]; !strings.Contains(last, "failed") {
		t.Fatalf("statuses %q: the conflicting job must be reported failed", got)
	}
	rec, err := e.store.Get(t.Context(), "acme", "effect:o-2")
	if err != nil || rec.Status != "succeeded" {
		t.Fatalf("the key's record after the conflict: %+v %v, want the first job's success untouched", rec, err)
	}
}

// TestSchemaRefusesPayload: a task that bypassed the gateway with a
// payload its declaration refuses fails at once, without running.
func TestSchemaRefusesPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int64
	mux := shipmentMux(t, e, e.deps(nil, 5*time.Second), &calls)
	err := mux.ProcessTask(t.Context(), tenantTask(t, "acme", `{"order_id": "o-3", "quantity": 0}`))
	var pe *job.PayloadError
	if !errors.As(err, &pe) || !IsPermanent(err) || calls.Load() != 0 {
		t.Fatalf("invalid payload: %v after %d calls, want a permanent *job.PayloadError and no call", err, calls.Load())
	}
	if len(pe.Fields) != 1 || pe.Fields[0].Field != "quantity" {
		t.Fatalf("fields %+v, want quantity", pe.Fields)
	}
}

func TestMuxRefusesJobsNoWorkerRuns(t *testing.T) {
	t.Parallel()
	a, b := shipmentSpec(t), shipmentSpec(t)
	a.Task, b.Task = "a.job", "b.job"
	hs := NewHandlers()
	Add(hs, "b.job", func(context.Context, Job[json.RawMessage]) (string, error) { return "", nil })
	_, err := hs.Mux(Deps{DB: fakeDB{}, Redis: fakeRedis{}}, []*job.Spec{a, b}, HTTPDelivery{})
	if err == nil || !strings.Contains(err.Error(), `"a.job"`) || strings.Contains(err.Error(), `"b.job"`) {
		t.Fatalf("Mux: %v, want it to name a.job (no handler, no deliver.http) and only it", err)
	}
	b.HTTP = &job.HTTP{URL: "http://127.0.0.1:1/hook"}
	if _, err := (*Handlers)(nil).Mux(Deps{DB: fakeDB{}, Redis: fakeRedis{}}, []*job.Spec{b}, HTTPDelivery{}); err != nil {
		t.Fatalf("an HTTP-delivered job needs no Go handler: %v", err)
	}
}

func TestAddPanicsOnWiringMistakes(t *testing.T) {
	t.Parallel()
	fn := func(context.Context, Job[shipment]) (string, error) { return "", nil }
	for name, add := range map[string]func(*Handlers){
		"empty task": func(hs *Handlers) { Add(hs, "", fn) },
		"nil func":   func(hs *Handlers) { Add[shipment](hs, "x", nil) },
		"twice":      func(hs *Handlers) { Add(hs, "x", fn); Add(hs, "x", fn) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			add(NewHandlers())
		})
	}
}

func TestScope(t *testing.T) {
	t.Parallel()
	if got := Scope("acme", "order:1"); got != "acme/order:1" {
		t.Fatalf("Scope = %q", got)
	}
	if got := Scope("", "order:1"); got != "order:1" {
		t.Fatalf("Scope without a tenant = %q", got)
	}
}

// TestLostLockCancelsDelivery: a delivery holds the resource's lock for the
// whole call; when the lock is lost (here: its key is deleted, as a Redis
// failover or a long pause would) the request is cancelled and the attempt
// stops without a verdict, leaving the job to whoever holds the lock next.
func TestLostLockCancelsDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv, arrived, cancelled := stallingReceiver(t)
	spec := shipmentSpec(t)
	spec.HTTP = &job.HTTP{URL: srv.URL, Secrets: [][]byte{[]byte("0123456789abcdef")}, Timeout: time.Minute}
	obs := newRecorder()
	mux, err := (*Handlers)(nil).Mux(e.deps(obs, 600*time.Millisecond), []*job.Spec{spec}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- mux.ProcessTask(t.Context(), tenantTask(t, "acme", `{"order_id": "o-4", "quantity": 1}`))
	}()
	waitClosed(t, arrived, "the delivery")
	if n, err := e.rdb.Del(t.Context(), e.prefix+"lock:{acme/order:o-4}").Result(); err != nil || n != 1 {
		t.Fatalf("deleting the held lock: %d %v", n, err)
	}
	waitClosed(t, cancelled, "the receiver to see the request cancelled")
	err = <-done
	var lost *OwnershipLostError
	if !errors.As(err, &lost) || IsPermanent(err) {
		t.Fatalf("attempt after losing the lock: %v, want an *OwnershipLostError (retried, not failed)", err)
	}
	if obs.count("lock:lost") != 1 {
		t.Errorf("locks lost: %d, want 1", obs.count("lock:lost"))
	}
	rec, err := e.store.Get(t.Context(), "acme", "effect:o-4")
	if err != nil || rec.Status != "processing" {
		t.Fatalf("record: %+v %v, want still processing: no verdict from an attempt that lost its lock", rec, err)
	}
}
