package telemetry_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemgate/idemgate/telemetry"
)

// With tracing off the instrumentation stays out of the request path, and
// a client's trace context still reaches the upstream untouched through
// the proxy's header copy.
func TestTracingOffAddsNothing(t *testing.T) {
	t.Parallel()
	off := telemetry.WithTracerProvider(noop.NewTracerProvider())
	var seen string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.Header.Get("traceparent") })
	wrapped := telemetry.HTTPHandler(h, off)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	r := httptest.NewRequest("GET", "/v1/x", nil)
	r.Header.Set("traceparent", tp)
	wrapped.ServeHTTP(httptest.NewRecorder(), r)
	if seen != tp {
		t.Fatalf("traceparent %q reached the handler, want %q", seen, tp)
	}
	if _, ok := wrapped.(http.HandlerFunc); !ok {
		t.Fatalf("HTTPHandler with tracing off returned %T, want the handler itself", wrapped)
	}
	base := &http.Transport{}
	if rt := telemetry.HTTPTransport(base, off); rt != http.RoundTripper(base) {
		t.Fatalf("HTTPTransport with tracing off returned %T, want the base transport", rt)
	}
}
