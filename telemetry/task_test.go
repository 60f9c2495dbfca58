package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/telemetry/telemetrytest"
)

// attr returns a span attribute or fails the test.
func attr(t *testing.T, s tracetest.SpanStub, key string) string {
	t.Helper()
	v, ok := telemetrytest.Attr(s, key)
	if !ok {
		t.Errorf("span %q has no attribute %s", s.Name, key)
	}
	return v
}

// one returns the only span called name.
func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := telemetrytest.Named(spans, name)
	if len(got) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("%d spans named %q, want 1; spans: %q", len(got), name, names)
	}
	return got[0]
}

// produce starts a request span and, under it, the enqueue span, and
// returns the task the gateway would enqueue and both spans' contexts.
func produce(t *testing.T, tp trace.TracerProvider, queue string) (*asynq.Task, trace.SpanContext, trace.SpanContext) {
	t.Helper()
	ctx, request := tp.Tracer("test").Start(t.Context(), "POST orders")
	ctx, enq := telemetry.StartEnqueue(ctx, "invoice.create", queue, telemetry.JobID("job-1"))
	headers := map[string]string{job.HeaderID: "job-1", job.HeaderTenant: "acme"}
	for k, v := range telemetry.InjectTask(ctx) {
		headers[k] = v
	}
	enq.End()
	request.End()
	task := asynq.NewTaskWithHeaders("invoice.create", []byte(`{"order_id":"42"}`), headers,
		asynq.TaskID("job-1-"+queue), asynq.Queue(queue))
	return task, request.SpanContext(), enq.SpanContext()
}

// work is a business handler that adds what the worker framework knows and
// writes "to the database" in a child span.
func work(ctx context.Context, _ *asynq.Task) error {
	telemetry.SetAttrs(ctx, telemetry.Resource("order:42"), telemetry.FencingToken(7), telemetry.Attempt(1))
	_, span := telemetry.Start(ctx, "fence.check")
	telemetry.End(span, nil)
	return nil
}

func TestTaskTracingContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	tp, exp := telemetrytest.NewProvider(t)
	task, request, enq := produce(t, tp, "default")
	for _, h := range []string{"traceparent"} {
		if task.Headers()[h] == "" {
			t.Fatalf("task headers %v lack %s", task.Headers(), h)
		}
	}

	// The worker runs elsewhere: its context knows nothing of the request.
	h := telemetry.TaskTracing(telemetry.WithTracerProvider(tp))(asynq.HandlerFunc(work))
	if err := h.ProcessTask(context.Background(), task); err != nil {
		t.Fatal(err)
	}

	spans := telemetrytest.Ended(t, tp, exp)
	producer := one(t, spans, "asynq.enqueue invoice.create")
	consumer := one(t, spans, "asynq.process invoice.create")
	child := one(t, spans, "fence.check")
	if producer.Parent.SpanID() != request.SpanID() || producer.SpanKind != trace.SpanKindProducer {
		t.Errorf("enqueue span: parent %s kind %s, want the request %s, producer", producer.Parent.SpanID(), producer.SpanKind, request.SpanID())
	}
	for _, s := range []tracetest.SpanStub{producer, consumer, child} {
		if s.SpanContext.TraceID() != request.TraceID() {
			t.Errorf("span %q in trace %s, want the request's %s", s.Name, s.SpanContext.TraceID(), request.TraceID())
		}
	}
	if consumer.Parent.SpanID() != enq.SpanID() || !consumer.Parent.IsRemote() {
		t.Errorf("task span's parent %s (remote %v), want the enqueue span %s carried in the task", consumer.Parent.SpanID(), consumer.Parent.IsRemote(), enq.SpanID())
	}
	if consumer.SpanKind != trace.SpanKindConsumer {
		t.Errorf("task span kind %s, want consumer", consumer.SpanKind)
	}
	if child.Parent.SpanID() != consumer.SpanContext.SpanID() {
		t.Errorf("handler's span parent %s, want the task span %s", child.Parent.SpanID(), consumer.SpanContext.SpanID())
	}
	for key, want := range map[string]string{
		"idemgate.task":            "invoice.create",
		"idemgate.job.id":          "job-1",
		"idemgate.tenant":          "acme",
		"idemgate.resource":        "order:42",
		"idemgate.fencing_token":   "7",
		"idemgate.attempt":         "1",
		"messaging.system":         "asynq",
		"messaging.operation.type": "process",
	} {
		if got := attr(t, consumer, key); got != want {
			t.Errorf("task span %s = %q, want %q", key, got, want)
		}
	}
	if got := attr(t, producer, "messaging.destination.name"); got != "default" {
		t.Errorf("enqueue span queue %q, want default", got)
	}
}

func TestTaskTracingWithoutTraceContextStartsATrace(t *testing.T) {
	t.Parallel()
	tp, exp := telemetrytest.NewProvider(t)
	task := asynq.NewTask("notification.send", nil) // enqueued by hand: no headers
	h := telemetry.TaskTracing(telemetry.WithTracerProvider(tp))(asynq.HandlerFunc(work))
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	s := one(t, telemetrytest.Ended(t, tp, exp), "asynq.process notification.send")
	if s.Parent.IsValid() {
		t.Errorf("task without trace context got parent %s, want a new trace", s.Parent.SpanID())
	}
	if _, ok := telemetrytest.Attr(s, "idemgate.job.id"); ok {
		t.Error("job id attribute set without a job_id header")
	}
}

var errBusy = errors.New("lock busy")

func TestTaskTracingRecordsErrors(t *testing.T) {
	t.Parallel()
	isFailure := func(err error) bool { return !errors.Is(err, errBusy) }
	tests := []struct {
		name       string
		err        error
		wantStatus codes.Code
	}{
		{"success", nil, codes.Unset},
		{"failure", errors.New("partner answered 500"), codes.Error},
		{"reschedule only", fmt.Errorf("order:42: %w", errBusy), codes.Unset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp, exp := telemetrytest.NewProvider(t)
			h := telemetry.TaskTracing(telemetry.WithTracerProvider(tp), telemetry.WithFailure(isFailure))(
				asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return tt.err }))
			if err := h.ProcessTask(t.Context(), asynq.NewTask("x.y", nil)); !errors.Is(err, tt.err) {
				t.Fatalf("middleware returned %v, want the handler's %v", err, tt.err)
			}
			s := one(t, telemetrytest.Ended(t, tp, exp), "asynq.process x.y")
			if s.Status.Code != tt.wantStatus {
				t.Errorf("status %v, want %v", s.Status.Code, tt.wantStatus)
			}
			recorded := len(s.Events) == 1 && s.Events[0].Name == "exception"
			if recorded != (tt.err != nil) {
				t.Errorf("events %v: error recorded %v, want %v", s.Events, recorded, tt.err != nil)
			}
		})
	}
}

func TestTaskTracingEndsTheSpanOnPanic(t *testing.T) {
	t.Parallel()
	tp, exp := telemetrytest.NewProvider(t)
	h := telemetry.TaskTracing(telemetry.WithTracerProvider(tp))(
		asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("boom") }))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the handler's panic passed on", r)
			}
		}()
		_ = h.ProcessTask(t.Context(), asynq.NewTask("x.y", nil))
	}()
	if s := one(t, telemetrytest.Ended(t, tp, exp), "asynq.process x.y"); s.Status.Code != codes.Error {
		t.Errorf("status %v after a panic, want Error", s.Status.Code)
	}
}

// TestTaskTraceThroughRedis sends the task through a real queue: asynq
// keeps the headers, and the worker's span names the task id and queue.
func TestTaskTraceThroughRedis(t *testing.T) {
	t.Parallel()
	opt, err := asynq.ParseRedisURI(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	queue := "telemetry-" + testkit.Prefix()[5:17]
	tp, exp := telemetrytest.NewProvider(t)
	task, request, enq := produce(t, tp, queue)

	client := asynq.NewClient(opt)
	defer client.Close()
	info, err := client.EnqueueContext(t.Context(), task)
	if err != nil {
		t.Fatal(err)
	}
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()
	defer func() { _ = inspector.DeleteQueue(queue, true) }()

	var once sync.Once
	done := make(chan struct{})
	mux := asynq.NewServeMux()
	mux.Use(telemetry.TaskTracing(telemetry.WithTracerProvider(tp)))
	mux.HandleFunc("invoice.create", func(ctx context.Context, task *asynq.Task) error {
		defer once.Do(func() { close(done) })
		return work(ctx, task)
	})
	srv := asynq.NewServer(opt, asynq.Config{
		Queues:            map[string]int{queue: 1},
		Concurrency:       1,
		TaskCheckInterval: 20 * time.Millisecond,
		Logger:            slogAsynq{slog.New(slog.DiscardHandler)},
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("task not processed")
	}
	srv.Shutdown()

	s := one(t, telemetrytest.Ended(t, tp, exp), "asynq.process invoice.create")
	if s.SpanContext.TraceID() != request.TraceID() || s.Parent.SpanID() != enq.SpanID() {
		t.Errorf("task span in trace %s under %s, want trace %s under the enqueue span %s",
			s.SpanContext.TraceID(), s.Parent.SpanID(), request.TraceID(), enq.SpanID())
	}
	for key, want := range map[string]string{
		"messaging.message.id":        info.ID,
		"messaging.destination.name":  queue,
		"messaging.asynq.retry_count": "0",
		"idemgate.job.id":             "job-1",
	} {
		if got := attr(t, s, key); got != want {
			t.Errorf("task span %s = %q, want %q", key, got, want)
		}
	}
}

type slogAsynq struct{ l *slog.Logger }

func (a slogAsynq) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a slogAsynq) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a slogAsynq) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a slogAsynq) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a slogAsynq) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }
