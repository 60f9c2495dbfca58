package main

import (
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace endpoint that accepts every export and
// keeps nothing but counts, so that `idembench run -tracing` measures
// idemgate with its exporter working and no collector's cost or back
// pressure in the figures. It decodes each export to count its spans,
// which shows that tracing was on.
type collector struct {
	exports, spans, bytes atomic.Int64
	addr                  string
	srv                   *http.Server
}

func startCollector() (*collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &collector{addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.export)
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

func (c *collector) export(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	c.exports.Add(1)
	c.spans.Add(int64(n))
	c.bytes.Add(int64(len(b)))
	// An empty ExportTraceServiceResponse: everything accepted.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// env is what points idemgate's exporter here (OTLP over HTTP/protobuf,
// every trace sampled: tracing at its most expensive); nil, tracing off,
// for no collector.
func (c *collector) env() []string {
	if c == nil {
		return nil
	}
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + c.addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=always_on",
	}
}

func (c *collector) close() { _ = c.srv.Close() }
