package telemetry

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// HTTPHandler wraps h in a server span per request, continuing the trace
// context the request carries. /healthz and /readyz are not traced: probes
// would bury the traffic. Spans are named by method until SetRoute names
// them by route. With tracing off (Setup found no exporter) h is returned
// as it is.
func HTTPHandler(h http.Handler, opts ...Option) http.Handler {
	o := newOptions(opts)
	if o.tracingOff() {
		return h
	}
	return otelhttp.NewHandler(h, "idemgate",
		otelhttp.WithTracerProvider(o.tp),
		otelhttp.WithPropagators(Propagator()),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/healthz" && r.URL.Path != "/readyz"
		}),
	)
}

// HTTPTransport wraps base in a client span per request made under a
// recording span, and injects the trace context into the outgoing headers,
// replacing any the caller sent: the upstream continues the gateway's (or
// the job's) trace. Requests outside a trace open none. A nil base is
// http.DefaultTransport. With tracing off base is returned as it is.
func HTTPTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	o := newOptions(opts)
	if base == nil {
		base = http.DefaultTransport
	}
	if o.tracingOff() {
		return base
	}
	return otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(parentOnly{o.tp}),
		otelhttp.WithPropagators(Propagator()),
	)
}

// SetRoute names r's server span "<METHOD> <route>" after the configured
// route the request matched, and adds the route attribute.
func SetRoute(r *http.Request, route string) {
	if s := trace.SpanFromContext(r.Context()); s.IsRecording() {
		s.SetName(r.Method + " " + route)
		s.SetAttributes(Route(route))
	}
}

// SetEndpoint names r's server span "<METHOD> <pattern>" after one of the
// gateway's own endpoints (pattern as registered, /v1/jobs/{id}) and sets
// http.route, so that spans of one endpoint share a name whatever the id.
func SetEndpoint(r *http.Request, pattern string) {
	if s := trace.SpanFromContext(r.Context()); s.IsRecording() {
		s.SetName(r.Method + " " + pattern)
		s.SetAttributes(attribute.String("http.route", pattern))
	}
}
