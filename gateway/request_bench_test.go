package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
	"github.com/idemgate/idemgate/telemetry"
)

// The public listener's whole chain — request id, access log, auth,
// idempotency on the memory store, the reverse proxy — with the upstream
// answered in process, so that what a request allocates is the gateway's
// own. tools/cmd/idembench measures the same path over the network.

// cannedUpstream answers every call like the bench upstream: a 201 with a
// Location and a small JSON body, without a network round trip.
type cannedUpstream struct{ body []byte }

func (u cannedUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusCreated, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":   {"application/json"},
			"Location":       {"/v1/payments/pay_1"},
			"Date":           {"Wed, 02 Dec 2026 10:00:00 GMT"},
			"Content-Length": {strconv.Itoa(len(u.body))},
		},
		Body: io.NopCloser(bytes.NewReader(u.body)), ContentLength: int64(len(u.body)), Request: req,
	}, nil
}

// benchWriter is the cheapest ResponseWriter that keeps the status.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}

// BenchmarkPublicPath runs unique keys and replays with the access log
// off (slog.DiscardHandler) and, under "log/", on: the JSON handler a
// deployment's log.format json builds, trace ids included, writing to
// io.Discard, so the line's cost is counted but no I/O.
func BenchmarkPublicPath(b *testing.B) {
	b.Run("nolog", func(b *testing.B) { benchPublicPath(b, slog.New(slog.DiscardHandler), memstore.New()) })
	b.Run("log", func(b *testing.B) {
		benchPublicPath(b, slog.New(telemetry.LogHandler(slog.NewJSONHandler(io.Discard, nil))), memstore.New())
	})
}

// BenchmarkPublicPathStores runs the same path, access log off, on each
// store: memory, and Redis and PostgreSQL when TEST_REDIS_URL and
// TEST_DATABASE_URL say where. Besides ns/op (the request's wall time,
// store round trips included) it reports cpu-ns/op: the process's user
// and system CPU per request, which counts the work the gateway does off
// the request path too (the request counts it adds to the store once a
// second, keycounts.go).
func BenchmarkPublicPathStores(b *testing.B) {
	logger := slog.New(slog.DiscardHandler)
	b.Run("memory", func(b *testing.B) { benchPublicPath(b, logger, memstore.New()) })
	b.Run("redis", func(b *testing.B) {
		s := redisstore.New(testkit.Redis(b), redisstore.WithPrefix(testkit.Prefix()))
		b.Cleanup(func() { _ = s.Close() })
		benchPublicPath(b, logger, s)
	})
	b.Run("postgres", func(b *testing.B) {
		s := pgstore.New(testkit.Pool(b))
		b.Cleanup(s.Close)
		benchPublicPath(b, logger, s)
	})
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchPublicPath(b *testing.B, logger *slog.Logger, store idempotency.Store) {
	upstream, _ := url.Parse("http://upstream.test")
	opts := Options{
		Auth: auth.Config{Mode: auth.ModeAPIKey, Tenants: []auth.TenantKeys{
			{Name: "acme", APIKeySHA256s: []string{hexSum(testAPIKey)}},
		}},
		Store:       store,
		StoreName:   "bench",
		ReplayCache: idempotency.NewReplayCache(10000, 2*time.Second),
		Transport:   cannedUpstream{body: []byte(`{"id":"pay_1","object":"payment","status":"succeeded","amount_cents":1250,"currency":"EUR","x":"0123456789"}`)},
		Logger:      logger,
		Routes: []RouteOptions{{
			Name: "payments", Methods: []string{http.MethodPost}, Path: "/v1/payments",
			Upstream: upstream, Timeout: 30 * time.Second,
			Idempotency: idempotency.Config{Lease: 30 * time.Second, Retention: 10 * time.Minute},
		}},
	}
	g, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Close(context.Background()) })
	h := g.Handler()
	body := []byte(`{"amount_cents":1250,"currency":"EUR","customer":"cus_42","description":"idembench"}`)
	u, _ := url.Parse("http://gateway.test/v1/payments")
	tmpl := http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: u.Host, RequestURI: u.Path, RemoteAddr: "127.0.0.1:40000"}
	var br bytes.Reader
	next := func(key string) *http.Request {
		r := tmpl // a shallow copy, as net/http's server hands each request over
		br.Reset(body)
		r.Body = io.NopCloser(&br)
		r.ContentLength = int64(len(body))
		r.Header = http.Header{
			"Content-Type":        {"application/json"},
			"Authorization":       {"Bearer " + testAPIKey},
			idempotency.HeaderKey: {key},
		}
		return r.WithContext(context.Background())
	}
	run := func(b *testing.B, key func() string, want int) {
		w := &benchWriter{h: http.Header{}}
		b.ReportAllocs()
		cpu := cpuTime(b)
		for b.Loop() {
			clear(w.h)
			w.status = 0
			h.ServeHTTP(w, next(key()))
		}
		b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		if w.status != want {
			b.Fatalf("status %d, want %d", w.status, want)
		}
	}

	// unique: a new key on every request. The counter outlives the
	// sub-benchmark, which -count runs again on the same gateway: keys
	// used before would be replays.
	var i int64
	b.Run("unique", func(b *testing.B) {
		prefix := []byte("u-")
		run(b, func() string { i++; return string(strconv.AppendInt(prefix[:2], i, 36)) }, http.StatusCreated)
	})
	b.Run("replay", func(b *testing.B) {
		w := &benchWriter{h: http.Header{}}
		h.ServeHTTP(w, next("replayed"))
		if w.status != http.StatusCreated {
			b.Fatalf("first request: %d", w.status)
		}
		run(b, func() string { return "replayed" }, http.StatusCreated)
	})
}

// BenchmarkKeyCountsObserve is what counting a request's key adds to the
// request path: a map entry under a mutex, for a new key each time and
// for one key again and again.
func BenchmarkKeyCountsObserve(b *testing.B) {
	k := newKeyCounts(memstore.New(), slog.New(slog.DiscardHandler))
	k.start()
	b.Cleanup(func() { _ = k.close(context.Background()) })
	at := time.Now()
	b.Run("unique", func(b *testing.B) {
		keys := make([]string, keyCountsFlushAt)
		for i := range keys {
			keys[i] = "u-" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k.observe(idempotency.Scope{Tenant: "acme", Route: "payments", Key: keys[i%len(keys)]}, string(idempotency.OutcomeNew), "", at)
			i++
		}
	})
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			k.observe(idempotency.Scope{Tenant: "acme", Route: "payments", Key: "replayed"}, string(idempotency.OutcomeReplay), "", at)
		}
	})
}

// BenchmarkKeyCountsFlush is what adding the counts costs off the request
// path, per key: one batch of 1024 keys with live records added to each
// store, as the flusher does once a second. cpu-ns/key is
// the gateway process's CPU (the store's own is not counted).
func BenchmarkKeyCountsFlush(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchKeyCountsFlush(b, memstore.New()) })
	b.Run("redis", func(b *testing.B) {
		s := redisstore.New(testkit.Redis(b), redisstore.WithPrefix(testkit.Prefix()))
		b.Cleanup(func() { _ = s.Close() })
		benchKeyCountsFlush(b, s)
	})
	b.Run("postgres", func(b *testing.B) {
		s := pgstore.New(testkit.Pool(b))
		b.Cleanup(s.Close)
		benchKeyCountsFlush(b, s)
	})
}

func benchKeyCountsFlush(b *testing.B, store idempotency.Store) {
	ctx := context.Background()
	batch := make([]idempotency.KeyCount, 1024)
	now, prefix := time.Now(), testkit.Prefix()
	for i := range batch {
		scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: prefix + strconv.Itoa(i)}
		if _, err := store.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: 2 * time.Minute}); err != nil {
			b.Fatal(err)
		}
		batch[i] = idempotency.KeyCount{Scope: scope, New: 1, Replayed: 2, First: now, Last: now}
	}
	counter := store.(idempotency.RequestCounter)
	cpu := cpuTime(b)
	for b.Loop() {
		if err := counter.AddRequests(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	keys := float64(b.N * len(batch))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/keys, "ns/key")
	b.ReportMetric(float64(cpuTime(b)-cpu)/keys, "cpu-ns/key")
}
