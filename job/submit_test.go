package job_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

type env struct {
	e         *job.Submitter
	pool      *pgxpool.Pool
	inspector *asynq.Inspector
	queue     string
}

func setup(t *testing.T) env {
	t.Helper()
	pool := testkit.Pool(t)
	client, inspector, queue := testkit.Queue(t, "test")
	return env{e: job.NewSubmitter(pool, client), pool: pool, inspector: inspector, queue: queue}
}

// invoiceSpec declares the job the test requests become. Its schema is
// testdata/invoice.create.json.
func invoiceSpec(task string) *job.Spec {
	schema, err := os.ReadFile("testdata/invoice.create.json")
	if err != nil {
		panic(err)
	}
	spec, err := job.NewSpec(task, schema, "invoice:{order_id}", "")
	if err != nil {
		panic(err)
	}
	return spec
}

func (v env) req(key, body string) job.Request {
	return job.Request{Tenant: "acme", Route: "invoices", Key: key, Spec: invoiceSpec("invoice.create"), Queue: v.queue, Body: []byte(body)}
}

func (v env) pending(t *testing.T) []*asynq.TaskInfo {
	t.Helper()
	tasks, err := v.inspector.ListPendingTasks(v.queue)
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		t.Fatal(err)
	}
	return tasks
}

func TestSubmitIsIdempotent(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	body := `{"order_id":"o-1","amount_cents":1200,"currency":"EUR"}`
	first, err := v.e.Submit(ctx, v.req("k1", body))
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != job.ID("acme", "invoices", "k1") || first.Status != job.StatusQueued || first.BusinessKey != "invoice:o-1" {
		t.Fatalf("job %+v", first)
	}
	for range 3 {
		again, err := v.e.Submit(ctx, v.req("k1", body))
		if err != nil || again.ID != first.ID {
			t.Fatalf("resubmit: %+v %v", again, err)
		}
	}
	tasks := v.pending(t)
	if len(tasks) != 1 || tasks[0].ID != first.ID || tasks[0].Headers[job.HeaderID] != first.ID {
		t.Fatalf("pending tasks %d (want exactly one with the job id)", len(tasks))
	}
	// Another tenant with the same key is another job.
	other := v.req("k1", body)
	other.Tenant = "globex"
	j2, err := v.e.Submit(ctx, other)
	if err != nil || j2.ID == first.ID {
		t.Fatalf("other tenant: %+v %v", j2, err)
	}
	if _, err := v.e.Get(ctx, "globex", first.ID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("globex read acme's job: %v", err)
	}
}

func TestSubmitRejectsBadPayloads(t *testing.T) {
	v := setup(t)
	tests := []struct {
		name, body string
		kind       error
		field      string
	}{
		{"not json", `{"order_id":`, job.ErrMalformed, ""},
		{"two values", `{"order_id":"o","amount_cents":1,"currency":"EUR"} {}`, job.ErrMalformed, ""},
		{"wrong type", `{"order_id":"o","amount_cents":"12","currency":"EUR"}`, job.ErrInvalid, "amount_cents"},
		{"unknown field", `{"order_id":"o","amount_cents":1,"currency":"EUR","x":1}`, job.ErrInvalid, "x"},
		{"missing field", `{"amount_cents":1,"currency":"EUR"}`, job.ErrInvalid, "order_id"},
		{"bad currency", `{"order_id":"o","amount_cents":1,"currency":"euro"}`, job.ErrInvalid, "currency"},
		{"negative amount", `{"order_id":"o","amount_cents":-1,"currency":"EUR"}`, job.ErrInvalid, "amount_cents"},
	}
	for _, tc := range tests {
		_, err := v.e.Submit(t.Context(), v.req("bad-"+tc.name, tc.body))
		var pe *job.PayloadError
		if !errors.Is(err, tc.kind) || !errors.As(err, &pe) || pe.Fields[0].Field != tc.field {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.kind, tc.field)
		}
		if _, err := v.e.Get(t.Context(), "acme", job.ID("acme", "invoices", "bad-"+tc.name)); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("%s: a rejected payload left a job record", tc.name)
		}
	}
	if n := len(v.pending(t)); n != 0 {
		t.Fatalf("rejected payloads enqueued %d tasks", n)
	}
}

// A gateway that died after the task was enqueued but before its response
// was stored: the retry submits again and gets the same job, no new task.
func TestCrashAfterEnqueueMakesNoSecondTask(t *testing.T) {
	v := setup(t)
	body := `{"order_id":"p-9","amount_cents":500,"currency":"EUR"}`
	r := v.req("crash", body)
	r.Spec = invoiceSpec("payment.charge")
	first, err := v.e.Submit(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	// Process restarts: a new Submitter on the same stores.
	again, err := v.e.Submit(context.WithoutCancel(t.Context()), r)
	if err != nil || again.ID != first.ID {
		t.Fatalf("retry after crash: %+v %v", again, err)
	}
	if n := len(v.pending(t)); n != 1 {
		t.Fatalf("%d tasks after a retry, want 1", n)
	}
}

// The queue was unreachable after the record was written: the retry
// enqueues the task it is missing.
func TestRetryEnqueuesWhatACrashLeftOut(t *testing.T) {
	v := setup(t)
	pool := testkit.Pool(t)
	dead := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: 200e6})
	t.Cleanup(func() { _ = dead.Close() })
	r := v.req("half", `{"order_id":"o-2","amount_cents":1,"currency":"EUR"}`)
	deferred, err := job.NewSubmitter(pool, dead).Submit(t.Context(), r)
	if !errors.Is(err, job.ErrTaskDeferred) || deferred.ID != job.ID("acme", "invoices", "half") || deferred.Status != job.StatusQueued {
		t.Fatalf("Submit with an unreachable queue: %+v %v, want the recorded job and ErrTaskDeferred", deferred, err)
	}
	live := asynq.NewClient(asynq.RedisClientOpt{Addr: v.inspectorAddr(t)})
	t.Cleanup(func() { _ = live.Close() })
	e := job.NewSubmitter(pool, live)
	rec, err := e.Get(t.Context(), "acme", job.ID("acme", "invoices", "half"))
	if err != nil || rec.Status != job.StatusQueued {
		t.Fatalf("record written before the failed enqueue: %+v %v", rec, err)
	}
	for range 2 {
		if _, err := e.Submit(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.pending(t)); n != 1 {
		t.Fatalf("%d tasks, want exactly 1", n)
	}
}

func (v env) inspectorAddr(t *testing.T) string {
	t.Helper()
	opt, err := asynq.ParseRedisURI(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return opt.(asynq.RedisClientOpt).Addr
}
