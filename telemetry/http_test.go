package telemetry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/telemetry/telemetrytest"
)

func TestHTTPTraceReachesTheUpstream(t *testing.T) {
	t.Parallel()
	tp, exp := telemetrytest.NewProvider(t)

	var (
		mu       sync.Mutex
		upstream = map[string]string{} // path → traceparent received
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upstream[r.URL.Path] = r.Header.Get("traceparent")
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)

	base := &http.Transport{}
	defer base.CloseIdleConnections()
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: telemetry.HTTPTransport(base, telemetry.WithTracerProvider(tp)),
	}
	gw := httptest.NewServer(telemetry.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/orders" {
			telemetry.SetRoute(r, "orders")
			telemetry.SetAttrs(r.Context(), telemetry.Tenant("acme"), telemetry.Outcome("new"))
		}
		proxy.ServeHTTP(w, r)
	}), telemetry.WithTracerProvider(tp)))
	defer gw.Close()

	// The caller is part of a trace already.
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, path := range []string{"/orders", "/healthz"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gw.URL+path, strings.NewReader("{}"))
		req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	spans := telemetrytest.Ended(t, tp, exp)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the server's and the upstream call's for /orders and none for /healthz", len(spans))
	}
	server := one(t, spans, "POST orders")
	call := one(t, spans, "HTTP POST")
	if server.SpanKind != trace.SpanKindServer || server.SpanContext.TraceID().String() != callerTrace || server.Parent.SpanID().String() != callerSpan {
		t.Errorf("server span %s in trace %s under %s, want a server span continuing %s under %s",
			server.SpanKind, server.SpanContext.TraceID(), server.Parent.SpanID(), callerTrace, callerSpan)
	}
	if call.SpanKind != trace.SpanKindClient || call.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("upstream call span %s under %s, want a client span under the server's %s", call.SpanKind, call.Parent.SpanID(), server.SpanContext.SpanID())
	}
	for key, want := range map[string]string{"idemgate.route": "orders", "idemgate.tenant": "acme", "idemgate.idempotency.outcome": "new"} {
		if got := attr(t, server, key); got != want {
			t.Errorf("server span %s = %q, want %q", key, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The upstream's parent is the gateway's call, not the original caller.
	want := "00-" + callerTrace + "-" + call.SpanContext.SpanID().String() + "-01"
	if got := upstream["/orders"]; got != want {
		t.Errorf("upstream got traceparent %q, want %q", got, want)
	}
	// An untraced request passes the caller's context through as it came.
	if got, want := upstream["/healthz"], "00-"+callerTrace+"-"+callerSpan+"-01"; got != want {
		t.Errorf("untraced request: upstream got traceparent %q, want the caller's %q", got, want)
	}
}
