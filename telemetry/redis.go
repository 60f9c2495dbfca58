package telemetry

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentRedis adds a client span per command (and per pipeline) to
// rdb, a *redis.Client or *redis.ClusterClient. Spans carry the command's
// name only: statements are off, because lock owner tokens, idempotency
// keys and stored responses travel as arguments. Spans start only under a
// recording parent, so background traffic (lease renewals outside a job,
// the janitor, readiness checks) does not open traces of its own.
//
// Give asynq an untraced client of its own: its polling would otherwise
// fill the traces of every job it serves. With tracing off it adds nothing.
func InstrumentRedis(rdb redis.UniversalClient, opts ...Option) error {
	o := newOptions(opts)
	if o.tracingOff() {
		return nil
	}
	err := redisotel.InstrumentTracing(rdb,
		redisotel.WithTracerProvider(parentOnly{o.tp}),
		redisotel.WithDBStatement(false),
		redisotel.WithCallerEnabled(false),
	)
	if err != nil {
		return fmt.Errorf("telemetry: redis: %w", err)
	}
	return nil
}

// parentOnly is a TracerProvider whose tracers start a span only when the
// context already has a recording one.
type parentOnly struct{ trace.TracerProvider }

func (p parentOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return parentOnlyTracer{p.TracerProvider.Tracer(name, opts...)}
}

type parentOnlyTracer struct{ trace.Tracer }

func (t parentOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if parent := trace.SpanFromContext(ctx); !parent.IsRecording() {
		// A span that does not record: ending it, as the caller will, is a
		// no-op.
		return ctx, parent
	}
	return t.Tracer.Start(ctx, name, opts...)
}
