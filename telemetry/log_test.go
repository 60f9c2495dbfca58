package telemetry_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/telemetry/telemetrytest"
)

func TestLogHandlerAddsTheTrace(t *testing.T) {
	t.Parallel()
	tp, _ := telemetrytest.NewProvider(t)
	var buf bytes.Buffer
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "worker")

	ctx, span := tp.Tracer("test").Start(t.Context(), "job")
	defer span.End()
	logger.InfoContext(ctx, "lock acquired", "resource", "order:42")
	logger.InfoContext(t.Context(), "outside a trace")

	dec := json.NewDecoder(&buf)
	var in, out map[string]any
	if err := dec.Decode(&in); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext()
	if in["trace_id"] != sc.TraceID().String() || in["span_id"] != sc.SpanID().String() || in["component"] != "worker" {
		t.Errorf("line in a trace: %v, want trace_id %s span_id %s and the logger's attributes", in, sc.TraceID(), sc.SpanID())
	}
	if got := telemetry.TraceID(ctx); got != sc.TraceID().String() {
		t.Errorf("TraceID = %q, want %s", got, sc.TraceID())
	}
	if _, ok := out["trace_id"]; ok || telemetry.TraceID(t.Context()) != "" {
		t.Errorf("line outside a trace has a trace id: %v", out)
	}
}
