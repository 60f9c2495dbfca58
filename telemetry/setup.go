package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator is the W3C trace context and baggage propagator. Setup makes
// it the global one; the HTTP wrappers and the task headers use it
// whatever the global is, so the wire format never depends on set-up order.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup installs the process's global tracer provider and propagator, for
// service (the default service.name), configured by the standard OTEL_*
// variables read through getenv:
//
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is) or
//     OTEL_EXPORTER_OTLP_ENDPOINT (the base; /v1/traces is added for HTTP).
//     With neither, tracing is off: a no-op provider and no exporter.
//   - OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none also turn it off.
//   - OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL: http/protobuf (default),
//     http/json or grpc; _HEADERS, _TIMEOUT (ms), _COMPRESSION (gzip,
//     none), _INSECURE (gRPC endpoints without a scheme).
//   - OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
//     parentbased_always_on).
//
// The exporter reads the variables Setup does not handle (certificates,
// OTEL_BSP_*) from the process environment itself. Every invalid variable
// is reported at once. The W3C propagator is installed even when tracing
// is off, so trace context still passes through to upstreams.
//
// shutdown flushes the spans still buffered and stops the exporter; call it
// once, with a deadline, when the process stops.
func Setup(ctx context.Context, service string, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator())
	off := func(context.Context) error { return nil }
	env := envReader{getenv: getenv}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return off, nil
	}
	exporterName := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch exporterName {
	case "", "otlp":
	case "none":
		otel.SetTracerProvider(noop.NewTracerProvider())
		return off, nil
	default:
		env.problem("OTEL_TRACES_EXPORTER %q: only otlp and none are supported", exporterName)
	}
	endpoint, generic := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), false
	if endpoint == "" {
		endpoint, generic = getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), true
	}
	if endpoint == "" {
		if err := errors.Join(env.problems...); err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		otel.SetTracerProvider(noop.NewTracerProvider())
		return off, nil
	}
	exp := env.exporter(ctx, endpoint, generic)
	sampler := env.sampler()
	res := env.resource(service)
	if err := errors.Join(env.problems...); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	spanExporter, err := exp()
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(spanExporter),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
	)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// envReader reads the OTEL_* variables and collects every problem.
type envReader struct {
	getenv   func(string) string
	problems []error
}

func (e *envReader) problem(format string, args ...any) {
	e.problems = append(e.problems, fmt.Errorf(format, args...))
}

// signal returns OTEL_EXPORTER_OTLP_TRACES_<name>, else
// OTEL_EXPORTER_OTLP_<name>, and the variable it came from.
func (e *envReader) signal(name string) (value, from string) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + name, "OTEL_EXPORTER_OTLP_" + name} {
		if s := strings.TrimSpace(e.getenv(v)); s != "" {
			return s, v
		}
	}
	return "", ""
}

// exporter checks the exporter's variables and returns the constructor of
// the exporter they describe.
func (e *envReader) exporter(ctx context.Context, endpoint string, generic bool) func() (sdktrace.SpanExporter, error) {
	endpointVar := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if generic {
		endpointVar = "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	protocol, _ := e.signal("PROTOCOL")
	if protocol == "" {
		protocol = "http/protobuf"
	}
	var headers map[string]string
	if s, from := e.signal("HEADERS"); s != "" {
		h, err := parseKeyValues(s)
		if err != nil {
			e.problem("%s: %v", from, err)
		}
		headers = h
	}
	var timeout time.Duration
	if s, from := e.signal("TIMEOUT"); s != "" {
		ms, err := strconv.Atoi(s)
		if err != nil || ms <= 0 {
			e.problem("%s %q: want a positive number of milliseconds", from, s)
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	gzip := false
	if s, from := e.signal("COMPRESSION"); s != "" {
		switch s {
		case "gzip":
			gzip = true
		case "none":
		default:
			e.problem("%s %q: want gzip or none", from, s)
		}
	}
	insecure := false
	if s, from := e.signal("INSECURE"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			e.problem("%s %q: want true or false", from, s)
		}
		insecure = b
	}

	switch protocol {
	case "http/protobuf", "http/json":
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			e.problem("%s %q: want an http or https URL", endpointVar, endpoint)
			return nil
		}
		if generic {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String())}
		if protocol == "http/json" {
			opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
		}
		if headers != nil {
			opts = append(opts, otlptracehttp.WithHeaders(headers))
		}
		if timeout > 0 {
			opts = append(opts, otlptracehttp.WithTimeout(timeout))
		}
		if gzip {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		} else {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.NoCompression))
		}
		return func() (sdktrace.SpanExporter, error) { return otlptracehttp.New(ctx, opts...) }
	case "grpc":
		var opts []otlptracegrpc.Option
		if strings.Contains(endpoint, "://") {
			u, err := url.Parse(endpoint)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				e.problem("%s %q: want host:port or an http or https URL", endpointVar, endpoint)
				return nil
			}
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		} else {
			opts = append(opts, otlptracegrpc.WithEndpoint(endpoint))
			if insecure {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		if headers != nil {
			opts = append(opts, otlptracegrpc.WithHeaders(headers))
		}
		if timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(timeout))
		}
		if gzip {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		return func() (sdktrace.SpanExporter, error) { return otlptracegrpc.New(ctx, opts...) }
	default:
		_, from := e.signal("PROTOCOL")
		e.problem("%s %q: want http/protobuf, http/json or grpc", from, protocol)
		return nil
	}
}

// sampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
func (e *envReader) sampler() sdktrace.Sampler {
	name := strings.TrimSpace(e.getenv("OTEL_TRACES_SAMPLER"))
	arg := strings.TrimSpace(e.getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() float64 {
		if arg == "" {
			return 1
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			e.problem("OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
			return 1
		}
		return f
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio()))
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio())
	default:
		e.problem("OTEL_TRACES_SAMPLER %q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
}

// resource describes the process: service.name is service unless
// OTEL_SERVICE_NAME or a service.name in OTEL_RESOURCE_ATTRIBUTES says
// otherwise (the former wins).
func (e *envReader) resource(service string) *resource.Resource {
	attrs := []attribute.KeyValue{attribute.String("service.name", service)}
	if s := strings.TrimSpace(e.getenv("OTEL_RESOURCE_ATTRIBUTES")); s != "" {
		kv, err := parseKeyValues(s)
		if err != nil {
			e.problem("OTEL_RESOURCE_ATTRIBUTES: %v", err)
		}
		for k, v := range kv {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	if s := strings.TrimSpace(e.getenv("OTEL_SERVICE_NAME")); s != "" {
		attrs = append(attrs, attribute.String("service.name", s))
	}
	// Later attributes win in a resource, so the order above is the
	// precedence. The SDK's own attributes come from the detector.
	res, err := resource.New(context.Background(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithAttributes(attrs...))
	if err != nil && res == nil {
		// A detector that fails only partly (no host name) still returns
		// what it found; without even that, keep our own attributes.
		res = resource.NewSchemaless(attrs...)
	}
	return res
}

// parseKeyValues parses the k1=v1,k2=v2 lists of OTEL_*_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES, whose values are percent-encoded.
func parseKeyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			// The item may be a credential: name its position, not its text.
			errs = append(errs, fmt.Errorf("item %d is not key=value", i+1))
			continue
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			errs = append(errs, fmt.Errorf("value of %q is not percent-encoded", k))
			continue
		}
		out[k] = dv
	}
	return out, errors.Join(errs...)
}
