package telemetrytest

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// NewProvider returns a tracer provider that samples every span and hands
// each ended span at once to the returned in-memory exporter. It is shut
// down when the test ends. Pass it with telemetry.WithTracerProvider; the
// global provider stays as it is, so tests using it can run in parallel.
func NewProvider(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// Ended returns the spans ended so far, flushing tp first.
func Ended(t testing.TB, tp *sdktrace.TracerProvider, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatalf("telemetrytest: flush: %v", err)
	}
	return exp.GetSpans()
}

// Named returns the spans called name.
func Named(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns the value of span's attribute key as a string ("" when
// absent) and whether it was there.
func Attr(span tracetest.SpanStub, key string) (string, bool) {
	for _, kv := range span.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}
