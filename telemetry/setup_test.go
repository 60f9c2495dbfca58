package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemgate/idemgate/telemetry"
)

// The tests in this file change the global provider: none runs in parallel.

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func resetGlobal(t *testing.T) {
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
}

// collector is an OTLP/HTTP receiver that keeps what it is sent.
type collector struct {
	*httptest.Server
	mu   sync.Mutex
	got  []*http.Request
	body [][]byte
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.got = append(c.got, r)
		c.body = append(c.body, b)
		c.mu.Unlock()
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) requests() ([]*http.Request, [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got), slices.Clone(c.body)
}

func TestSetupOffWithoutEndpoint(t *testing.T) {
	resetGlobal(t)
	for name, vars := range map[string]map[string]string{
		"no endpoint":       {"OTEL_SERVICE_NAME": "x"},
		"sdk disabled":      {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
		"exporter none":     {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
		"bad protocol, off": {"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon", "OTEL_SDK_DISABLED": "true"},
	} {
		t.Run(name, func(t *testing.T) {
			shutdown, err := telemetry.Setup(t.Context(), "idemgate", env(vars))
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(t.Context(), "x")
			if span.IsRecording() {
				t.Error("tracing is on")
			}
			span.End()
			if err := shutdown(t.Context()); err != nil {
				t.Error(err)
			}
			// The propagator is W3C even with tracing off.
			fields := otel.GetTextMapPropagator().Fields()
			if !slices.Contains(fields, "traceparent") || !slices.Contains(fields, "baggage") {
				t.Errorf("global propagator fields %v, want traceparent and baggage", fields)
			}
		})
	}
}

func TestSetupExportsToTheConfiguredEndpoint(t *testing.T) {
	resetGlobal(t)
	tests := []struct {
		name        string
		vars        func(url string) map[string]string
		path        string
		contentType string
		service     string
	}{
		{
			name: "base endpoint gets /v1/traces",
			vars: func(u string) map[string]string {
				return map[string]string{
					"OTEL_EXPORTER_OTLP_ENDPOINT": u + "/otlp/",
					"OTEL_EXPORTER_OTLP_HEADERS":  "Authorization=Bearer%20s3cret,X-Tenant=ops",
				}
			},
			path: "/otlp/v1/traces", contentType: "application/x-protobuf", service: "idemgate",
		},
		{
			name: "traces endpoint is used as is",
			vars: func(u string) map[string]string {
				return map[string]string{
					"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://127.0.0.1:1",
					"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": u + "/custom",
					"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  "Authorization=Bearer%20s3cret",
					"OTEL_EXPORTER_OTLP_HEADERS":         "Authorization=wrong",
					"OTEL_SERVICE_NAME":                  "idemgate-worker-7",
				}
			},
			path: "/custom", contentType: "application/x-protobuf", service: "idemgate-worker-7",
		},
		{
			name: "http/json",
			vars: func(u string) map[string]string {
				return map[string]string{
					"OTEL_EXPORTER_OTLP_ENDPOINT":        u,
					"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
					"OTEL_EXPORTER_OTLP_HEADERS":         "authorization=Bearer%20s3cret",
					"OTEL_RESOURCE_ATTRIBUTES":           "service.name=from-attributes,deployment.environment=test",
					"OTEL_EXPORTER_OTLP_COMPRESSION":     "none",
				}
			},
			path: "/v1/traces", contentType: "application/json", service: "from-attributes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollector(t)
			shutdown, err := telemetry.Setup(t.Context(), "idemgate", env(tt.vars(c.URL)))
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(t.Context(), "claim")
			if !span.IsRecording() {
				t.Fatal("tracing is off")
			}
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			reqs, bodies := c.requests()
			if len(reqs) != 1 {
				t.Fatalf("collector got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != http.MethodPost || r.URL.Path != tt.path || r.Header.Get("Content-Type") != tt.contentType {
				t.Errorf("got %s %s (%s), want POST %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"), tt.path, tt.contentType)
			}
			if got := r.Header.Get("Authorization"); got != "Bearer s3cret" {
				t.Errorf("Authorization %q, want the decoded header", got)
			}
			if !strings.Contains(string(bodies[0]), tt.service) || !strings.Contains(string(bodies[0]), "claim") {
				t.Errorf("export lacks service %q or the span", tt.service)
			}
		})
	}
}

func TestSetupReportsEveryProblem(t *testing.T) {
	resetGlobal(t)
	_, err := telemetry.Setup(t.Context(), "idemgate", env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":    "http://127.0.0.1:4318",
		"OTEL_EXPORTER_OTLP_PROTOCOL":    "carrier-pigeon",
		"OTEL_EXPORTER_OTLP_TIMEOUT":     "soon",
		"OTEL_EXPORTER_OTLP_HEADERS":     "Bearer hunter2",
		"OTEL_TRACES_SAMPLER":            "sometimes",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd",
	}))
	if err == nil {
		t.Fatal("no error")
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_TRACES_SAMPLER", "OTEL_EXPORTER_OTLP_COMPRESSION"} {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("error does not name %s:\n%v", v, err)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error repeats a header's text: %v", err)
	}
}

func TestSetupGRPC(t *testing.T) {
	resetGlobal(t)
	shutdown, err := telemetry.Setup(t.Context(), "idemgate", env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:1",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(t.Context(), "x")
	if !span.IsRecording() {
		t.Error("tracing is off")
	}
	// Nothing is ended, so nothing is sent: shutdown only closes the client.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
