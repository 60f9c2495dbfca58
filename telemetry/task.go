package telemetry

import (
	"context"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/job"
)

// InjectTask returns ctx's trace context as task headers (traceparent,
// tracestate, baggage), to carry a trace across the queue. It is the
// signature of job.Submitter.Headers. Without a span in ctx it returns
// an empty map.
func InjectTask(ctx context.Context) map[string]string {
	carrier := propagation.MapCarrier{}
	Propagator().Inject(ctx, carrier)
	return carrier
}

// TaskTracing is asynq middleware (ServeMux.Use) that starts a consumer
// span, "asynq.process <type>", for each delivery of a task, under the
// trace context its headers carry. Everything the handler does under the
// task's context (locks, fenced writes, partner calls) joins the trace of
// the request that enqueued it; every delivery of a task is a child of the
// same producer span. The span carries the task type, task id, queue,
// asynq retry count and the job_id and tenant headers.
//
// A handler error is recorded on the span; only errors that WithFailure
// calls failures set its status to Error.
func TaskTracing(opts ...Option) asynq.MiddlewareFunc {
	o := newOptions(opts)
	tr := o.tp.Tracer(ScopeName)
	prop := Propagator()
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) (err error) {
			headers := task.Headers()
			ctx = prop.Extract(ctx, propagation.MapCarrier(headers))
			attrs := []attribute.KeyValue{
				attribute.String("messaging.system", "asynq"),
				attribute.String("messaging.operation.type", "process"),
				Task(task.Type()),
			}
			if id, ok := asynq.GetTaskID(ctx); ok {
				attrs = append(attrs, attribute.String("messaging.message.id", id))
			}
			if q, ok := asynq.GetQueueName(ctx); ok {
				attrs = append(attrs, attribute.String("messaging.destination.name", q))
			}
			if n, ok := asynq.GetRetryCount(ctx); ok {
				attrs = append(attrs, attribute.Int("messaging.asynq.retry_count", n))
			}
			if id := headers[job.HeaderID]; id != "" {
				attrs = append(attrs, JobID(id))
			}
			if t := headers[job.HeaderTenant]; t != "" {
				attrs = append(attrs, Tenant(t))
			}
			ctx, span := tr.Start(ctx, "asynq.process "+task.Type(),
				trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
			defer func() {
				if r := recover(); r != nil {
					span.SetStatus(codes.Error, "panic")
					span.End()
					panic(r) // asynq turns a handler's panic into an error
				}
				if err != nil {
					span.RecordError(err)
					if o.isFailure(err) {
						span.SetStatus(codes.Error, err.Error())
					}
				}
				span.End()
			}()
			return next.ProcessTask(ctx, task)
		})
	}
}
