package telemetry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of idemgate's own spans.
const ScopeName = "github.com/idemgate/idemgate"

// Span attribute keys. The values come from the request or the job, never
// from bodies or credentials.
const (
	KeyTenant       = attribute.Key("idemgate.tenant")
	KeyRoute        = attribute.Key("idemgate.route")
	KeyOutcome      = attribute.Key("idemgate.idempotency.outcome")
	KeyJobID        = attribute.Key("idemgate.job.id")
	KeyTask         = attribute.Key("idemgate.task")
	KeyResource     = attribute.Key("idemgate.resource")
	KeyFencingToken = attribute.Key("idemgate.fencing_token")
	KeyAttempt      = attribute.Key("idemgate.attempt")
	KeyStore        = attribute.Key("idemgate.store")
	KeyStoreOp      = attribute.Key("idemgate.store.op")
)

// Tenant is the authenticated tenant.
func Tenant(name string) attribute.KeyValue { return KeyTenant.String(name) }

// Route is the configured route's name.
func Route(name string) attribute.KeyValue { return KeyRoute.String(name) }

// Outcome is the idempotency outcome (new, replay, conflict, mismatch…).
func Outcome(outcome string) attribute.KeyValue { return KeyOutcome.String(outcome) }

// JobID is the job's id, as the gateway answered it.
func JobID(id string) attribute.KeyValue { return KeyJobID.String(id) }

// Task is the task kind (invoice.create).
func Task(kind string) attribute.KeyValue { return KeyTask.String(kind) }

// Resource is the entity a job is serialised on (order:42).
func Resource(resource string) attribute.KeyValue { return KeyResource.String(resource) }

// FencingToken is the fencing token of an idempotency record or a job
// attempt.
func FencingToken(token int64) attribute.KeyValue { return KeyFencingToken.Int64(token) }

// Attempt counts a job's real attempts, from 1.
func Attempt(n int) attribute.KeyValue { return KeyAttempt.Int(n) }

// Store names an idempotency store (postgres, redis, memory).
func Store(name string) attribute.KeyValue { return KeyStore.String(name) }

// StoreOp names a store operation (claim, complete, release).
func StoreOp(op string) attribute.KeyValue { return KeyStoreOp.String(op) }

// Option adjusts the instrumentation this package builds.
type Option func(*options)

type options struct {
	tp        trace.TracerProvider
	isFailure func(error) bool
}

// WithTracerProvider makes the instrumentation use tp instead of the
// global provider that Setup installs.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// WithFailure tells TaskTracing which handler errors are failures: only
// those set the span's status to Error. An error that only reschedules the
// task (a busy lock) is still recorded on the span as an event. Default:
// every error is a failure. Pass workers.IsFailure.
func WithFailure(isFailure func(error) bool) Option {
	return func(o *options) { o.isFailure = isFailure }
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.tp == nil {
		// The global provider delegates to the one Setup installs, even
		// when it is taken before Setup runs.
		o.tp = otel.GetTracerProvider()
	}
	if o.isFailure == nil {
		o.isFailure = func(error) bool { return true }
	}
	return o
}

// tracingOff reports whether o's provider is the no-op one Setup installs
// when no exporter is configured. The instrumentation then stays out of the
// request path altogether: a no-op span still costs its wrapping, its
// attributes and otelhttp's metric bookkeeping on every request.
func (o options) tracingOff() bool {
	_, off := o.tp.(noop.TracerProvider)
	return off
}

// tracer returns the tracer for a span started under ctx: the provider of
// the span already in ctx when it records (so a trace stays in one
// provider), else the global one.
func tracer(ctx context.Context) trace.Tracer {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		return s.TracerProvider().Tracer(ScopeName)
	}
	return otel.GetTracerProvider().Tracer(ScopeName)
}

// Start starts an internal span named name under ctx's span (a store
// claim, a lock acquisition). End it with End.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracer(ctx).Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// StartEnqueue starts the producer span of enqueueing a task of kind on
// queue, named "asynq.enqueue <kind>". Enqueue under the returned context:
// InjectTask then carries this span into the task, and the worker's span
// becomes its child.
func StartEnqueue(ctx context.Context, kind, queue string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	all := append([]attribute.KeyValue{
		attribute.String("messaging.system", "asynq"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", queue),
		Task(kind),
	}, attrs...)
	return tracer(ctx).Start(ctx, "asynq.enqueue "+kind, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(all...))
}

// End ends span, first recording err on it as the span's error.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// SetAttrs adds attributes to ctx's span, if it records: the gateway adds
// the tenant, route and outcome as it learns them, the worker the
// resource, fencing token and attempt.
func SetAttrs(ctx context.Context, attrs ...attribute.KeyValue) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.SetAttributes(attrs...)
	}
}

// TraceID returns the hex trace id of ctx's span, or "" without one: the
// trace_id field of log lines.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
