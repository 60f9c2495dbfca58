package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// The benchmarks of the hot path below the store: key parsing,
// fingerprinting, and the whole middleware on memstore. tools/cmd/idembench
// measures the gateway end to end; these say where its time goes.

func BenchmarkParseKey(b *testing.B) {
	for _, c := range []struct {
		name   string
		value  string
		syntax idempotency.KeySyntax
	}{
		{"bare-uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", idempotency.KeyCompat},
		{"quoted-uuid", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, idempotency.KeyStrict},
		{"quoted-escaped", `"order \"42\" \\ retry"`, idempotency.KeyStrict},
		{"bare-255", strings.Repeat("k", 255), idempotency.KeyCompat},
		{"invalid-list", "a, b", idempotency.KeyCompat},
	} {
		b.Run(c.name, func(b *testing.B) {
			values := []string{c.value}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = idempotency.ParseKey(values, c.syntax, 255)
			}
		})
	}
}

func BenchmarkFingerprint(b *testing.B) {
	small := []byte(`{"amount_cents":1250,"currency":"EUR","customer":"cus_42","description":"idembench"}`)
	var big bytes.Buffer
	big.WriteString(`{"order_id":"ord_1","lines":[`)
	for i := range 40 {
		if i > 0 {
			big.WriteByte(',')
		}
		big.WriteString(`{"sku":"sku-` + strconv.Itoa(i) + `","qty":` + strconv.Itoa(i%7+1) + `,"price_cents":1999,"note":"gift wrap, please"}`)
	}
	big.WriteString(`],"currency":"EUR"}`)
	for _, c := range []struct {
		name    string
		headers []string
		fields  []string
		in      idempotency.FingerprintInput
	}{
		{name: "json-small", in: idempotency.FingerprintInput{ContentType: "application/json", Body: small}},
		{name: "json-4KiB", in: idempotency.FingerprintInput{ContentType: "application/json", Body: big.Bytes()}},
		{name: "json-fields", fields: []string{"/order_id", "/currency"}, in: idempotency.FingerprintInput{ContentType: "application/json", Body: big.Bytes()}},
		// A proxied body is not bounded in depth: its fingerprint costs
		// time linear in its size up to encoding/json's 10000 levels,
		// past which it is fingerprinted as raw bytes.
		{name: "json-nested-9990", in: idempotency.FingerprintInput{ContentType: "application/json",
			Body: []byte(strings.Repeat(`{"a":`, 9990) + "1" + strings.Repeat("}", 9990))}},
		{name: "raw-4KiB", in: idempotency.FingerprintInput{ContentType: "application/octet-stream", Body: big.Bytes()}},
		{name: "query-headers", headers: []string{"X-Account", "Accept-Language"}, in: idempotency.FingerprintInput{
			RawQuery: "expand=customer&b=2&a=1&a=0", ContentType: "application/json; charset=utf-8", Body: small,
			Header: http.Header{"X-Account": {"acct_1"}, "Accept-Language": {"en, de;q=0.5"}},
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := idempotency.NewFingerprinter(c.headers, c.fields)
			if err != nil {
				b.Fatal(err)
			}
			in := c.in
			in.Method, in.Route, in.Path = http.MethodPost, "payments", "/v1/payments"
			b.SetBytes(int64(len(in.Body)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = f.Fingerprint(in)
			}
		})
	}
}

// discardWriter is the cheapest ResponseWriter: it keeps the status so a
// benchmark can check it.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status = 0
}

// upstreamLike answers like the bench upstream: a small 201 JSON document
// with a Location.
var upstreamLike = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/v1/payments/pay_1")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"pay_1","object":"payment","status":"succeeded","amount_cents":1250,"currency":"EUR"}`)
})

// benchRequest builds each iteration's request with as little as possible
// of its own cost: the "handler-only" case measures exactly that, so the
// middleware's cost is the difference.
type benchRequest struct {
	tmpl http.Request
	body []byte
	br   bytes.Reader
}

func newBenchRequest() *benchRequest {
	u, _ := url.Parse("http://gateway.test/v1/payments")
	br := &benchRequest{body: []byte(`{"amount_cents":1250,"currency":"EUR","customer":"cus_42","description":"idembench"}`)}
	br.tmpl = http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: u.Host, RequestURI: u.Path}
	return br
}

func (br *benchRequest) next(key string) *http.Request {
	r := br.tmpl // a shallow copy, as net/http's server hands each request over
	br.br.Reset(br.body)
	r.Body = io.NopCloser(&br.br)
	r.ContentLength = int64(len(br.body))
	r.Header = http.Header{"Content-Type": {"application/json"}, idempotency.HeaderKey: {key}}
	return r.WithContext(context.Background())
}

func BenchmarkMiddleware(b *testing.B) {
	newMW := func(b *testing.B) (*idempotency.Middleware, *memstore.Store) {
		store := memstore.New()
		mw, err := idempotency.New(store, idempotency.Config{
			Route:  "payments",
			Tenant: func(*http.Request) string { return "acme" },
		})
		if err != nil {
			b.Fatal(err)
		}
		return mw, store
	}
	expect := func(b *testing.B, w *discardWriter, want int) {
		if w.status != want {
			b.Fatalf("status %d, want %d", w.status, want)
		}
	}

	// newKeys serves h a request under a key of its own each iteration.
	newKeys := func(b *testing.B, h http.Handler) {
		b.Helper()
		br, w := newBenchRequest(), &discardWriter{h: http.Header{}}
		key := []byte("k-")
		var i int64
		b.ReportAllocs()
		for b.Loop() {
			i++
			w.reset()
			h.ServeHTTP(w, br.next(string(strconv.AppendInt(key[:2], i, 36))))
		}
		expect(b, w, http.StatusCreated)
	}

	b.Run("handler-only", func(b *testing.B) { newKeys(b, upstreamLike) })

	// new: every request has a key of its own, so each one claims,
	// runs the handler and completes (the store keeps growing, as it
	// does under unique keys until retention ends).
	b.Run("new", func(b *testing.B) {
		mw, _ := newMW(b)
		newKeys(b, mw.Wrap(upstreamLike))
	})

	b.Run("replay", func(b *testing.B) {
		mw, _ := newMW(b)
		h := mw.Wrap(upstreamLike)
		br, w := newBenchRequest(), &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, br.next("replayed"))
		expect(b, w, http.StatusCreated)
		b.ReportAllocs()
		for b.Loop() {
			w.reset()
			h.ServeHTTP(w, br.next("replayed"))
		}
		expect(b, w, http.StatusCreated)
		if w.h.Get(idempotency.HeaderReplayed) != "true" {
			b.Fatal("not a replay")
		}
	})

	// in-flight: the original holds the claim in its handler while every
	// duplicate is refused with 409.
	b.Run("in-flight", func(b *testing.B) {
		mw, _ := newMW(b)
		entered, release := make(chan struct{}), make(chan struct{})
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(idempotency.HeaderKey) == "held" {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-release
			}
			upstreamLike.ServeHTTP(w, r)
		}))
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(&discardWriter{h: http.Header{}}, newBenchRequest().next("held"))
		}()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			b.Fatal("the original never started")
		}
		br, w := newBenchRequest(), &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			w.reset()
			h.ServeHTTP(w, br.next("held"))
		}
		expect(b, w, http.StatusConflict)
		close(release)
		<-done
	})
}
