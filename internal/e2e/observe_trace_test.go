package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idemgate/idemgate/internal/testkit"
)

// collector is an OTLP/HTTP trace receiver that keeps every span in memory.
type collector struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				c.spans = append(c.spans, ss.GetSpans()...)
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) all() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...)
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return anyValue(kv.GetValue())
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	}
	return v.String()
}

// logLine returns the first JSON log line that match accepts.
func logLine(t *testing.T, log string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && match(m) {
			return m
		}
	}
	t.Fatalf("no such log line in:\n%s", tail(log, 4000))
	return nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestOneTraceFromRequestToWorker: `idemgate dev` exporting to an OTLP
// receiver; one enqueued job gives one trace in which the worker's
// processing descends from the enqueue, which descends from the HTTP
// request, and the spans carry tenant, route, job id, resource, fencing
// token and attempt.
func TestOneTraceFromRequestToWorker(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	col := newCollector(t)
	up := newUpstream(t)
	queue := "q" + randomID()
	extra := fmt.Sprintf(`  - {name: invoices, methods: [POST], path: /v1/invoices, enqueue: {task: invoice.create, queue: %s}}
worker:
  admin_listen: "127.0.0.1:0"
  queues: {%s: 1}
  partner_url: "http://%s"
`, queue, queue, freeAddr(t))
	cfg := writeConfig(t, "postgres", dbURL, redisURL, up.srv.URL, extra)
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--config", cfg}, func(k string) string { return env[k] }, out, errOut)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("dev: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("dev log (last 4000 bytes):\n%s", tail(errOut.String(), 4000))
		}
	})
	var public string
	testkit.Eventually(t, "dev listening", 30*time.Second, func() bool {
		public = addrs(out.String())["public"]
		return public != ""
	})

	run := randomID()
	r := send(t, public, req{path: "/v1/invoices", key: run, body: `{"order_id":"o-` + run + `","amount_cents":700,"currency":"EUR"}`})
	if r.status != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}
	jobID := decodeJob(t, r).ID
	testkit.Eventually(t, "job succeeded", 60*time.Second, func() bool {
		return decodeJob(t, getJob(t, public, jobID, "acme-key")).Status == "succeeded"
	})
	// A replay of the request: its access log line says so, with the
	// fields an operator searches by, and never the credentials or body.
	if again := send(t, public, req{path: "/v1/invoices", key: run, body: `{"order_id":"o-` + run + `","amount_cents":700,"currency":"EUR"}`}); again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second request: %d, not a replay", again.status)
	}
	stop() // flushes the spans
	replayLine := logLine(t, errOut.String(), func(m map[string]any) bool { return m["msg"] == "request" && m["outcome"] == "replay" })
	for k, want := range map[string]any{"tenant": "acme", "route": "invoices", "idempotency_key": run, "status": float64(202), "job_id": jobID, "path": "/v1/invoices"} {
		if replayLine[k] != want {
			t.Errorf("replay log %s = %v, want %v (line %v)", k, replayLine[k], want, replayLine)
		}
	}
	for _, k := range []string{"request_id", "trace_id", "duration_ms"} {
		if replayLine[k] == nil || replayLine[k] == "" {
			t.Errorf("replay log lacks %s: %v", k, replayLine)
		}
	}
	if raw, _ := json.Marshal(replayLine); strings.Contains(string(raw), "acme-key") || strings.Contains(string(raw), "amount_cents") {
		t.Errorf("replay log carries a credential or the body: %s", raw)
	}

	spans := col.all()
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		byID[string(s.GetSpanId())] = s
	}
	find := func(what string, match func(*tracepb.Span) bool) *tracepb.Span {
		t.Helper()
		for _, s := range spans {
			if match(s) {
				return s
			}
		}
		var names []string
		for _, s := range spans {
			names = append(names, s.GetName())
		}
		t.Fatalf("no %s among %d spans: %q", what, len(spans), names)
		return nil
	}
	server := find("server span of the request", func(s *tracepb.Span) bool {
		return s.GetKind() == tracepb.Span_SPAN_KIND_SERVER && strings.Contains(s.GetName(), "invoices")
	})
	enq := find("enqueue span", func(s *tracepb.Span) bool {
		return strings.HasPrefix(s.GetName(), "asynq.enqueue") && attr(s, "idemgate.job.id") == jobID
	})
	work := find("worker processing span", func(s *tracepb.Span) bool {
		return strings.HasPrefix(s.GetName(), "asynq.process invoice.create") && string(s.GetTraceId()) == string(enq.GetTraceId())
	})
	// descends reports whether s has ancestor among its parents.
	descends := func(s, ancestor *tracepb.Span) bool {
		for p := byID[string(s.GetParentSpanId())]; p != nil; p = byID[string(p.GetParentSpanId())] {
			if string(p.GetSpanId()) == string(ancestor.GetSpanId()) {
				return true
			}
		}
		return false
	}
	if string(server.GetTraceId()) != string(enq.GetTraceId()) || !descends(enq, server) {
		t.Fatalf("the enqueue span is not in the request's trace under its server span")
	}
	if !descends(work, enq) {
		t.Fatalf("the worker's span does not descend from the enqueue span")
	}
	newLine := logLine(t, errOut.String(), func(m map[string]any) bool {
		return m["msg"] == "request" && m["outcome"] == "new" && m["job_id"] == jobID
	})
	if newLine["trace_id"] != fmt.Sprintf("%x", server.GetTraceId()) {
		t.Errorf("request log trace_id %v, want the trace's %x", newLine["trace_id"], server.GetTraceId())
	}
	if got := attr(server, "idemgate.tenant"); got != "acme" {
		t.Errorf("server span tenant %q, want acme", got)
	}
	if got := attr(server, "idemgate.route"); got != "invoices" {
		t.Errorf("server span route %q, want invoices", got)
	}
	for key, want := range map[string]string{
		"idemgate.resource": "acme/order:o-" + run,
		"idemgate.attempt":  "1",
	} {
		if got := attr(work, key); got != want {
			t.Errorf("worker span %s = %q, want %q", key, got, want)
		}
	}
	if n, err := strconv.ParseInt(attr(work, "idemgate.fencing_token"), 10, 64); err != nil || n < 1 {
		t.Errorf("worker span idemgate.fencing_token %q, want the attempt's token", attr(work, "idemgate.fencing_token"))
	}
	if got := attr(work, "idemgate.job.id"); got != jobID {
		t.Errorf("worker span job id %q, want %q", got, jobID)
	}
	// Polls of the job are named by their endpoint, not by the id.
	find("span of GET /v1/jobs/{id}", func(s *tracepb.Span) bool {
		return s.GetKind() == tracepb.Span_SPAN_KIND_SERVER && s.GetName() == "GET /v1/jobs/{id}" && attr(s, "http.route") == "/v1/jobs/{id}"
	})
	// The worker's database writes (the invoice's INSERT) are in the same
	// trace, under its span.
	find("PostgreSQL INSERT under the worker", func(s *tracepb.Span) bool {
		return s.GetName() == "query INSERT" && descends(s, work)
	})
}
