package gateway

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// decodeBody reads a problem document from a body serve returned.
func decodeBody(t *testing.T, body string) openapi.Problem {
	t.Helper()
	var p openapi.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problem document: %v: %s", err, body)
	}
	return p
}

// An empty Idempotency-Key names the key it refuses, the empty string as
// sent, as the other key problems name theirs.
func TestEmptyKeyProblemNamesTheKey(t *testing.T) {
	t.Parallel()
	g := echoGateway(t)
	for _, sent := range []string{"", " ", `""`} {
		r, body := serve(t, g.Handler(), http.MethodPost, "/v1/echo", "", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", sent)
		p := decodeBody(t, body)
		if r.StatusCode != http.StatusBadRequest || p.Type != "https://idemgate.dev/problems/idempotency-key-invalid" {
			t.Fatalf("key %q: %d %s, want 400 idempotency-key-invalid", sent, r.StatusCode, p.Type)
		}
		if p.IdempotencyKey == nil || *p.IdempotencyKey != "" {
			t.Errorf("key %q: idempotency_key %#v, want the empty string: %s", sent, p.IdempotencyKey, body)
		}
	}
}

// overrideGateway proxies /v1/orders, with no methods list, to an upstream
// that records the method of each request it runs.
func overrideGateway(t *testing.T, honour bool) (*Gateway, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var ran []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, r.Method)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	opts := testOptions(fakeJobs{})
	opts.Routes = []RouteOptions{{Name: "orders", Path: "/v1/orders", Upstream: u, HonourMethodOverride: honour}}
	return newTestGateway(t, opts), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ran)
	}
}

// Finding 1: a request that names another method in an override header
// does not reach the upstream unprotected. By default it is refused; a
// route that honours the header claims it as the method it names.
func TestMethodOverride(t *testing.T) {
	t.Parallel()
	bearer := []string{"Authorization", "Bearer " + testAPIKey}
	t.Run("refused by default", func(t *testing.T) {
		t.Parallel()
		g, ran := overrideGateway(t, false)
		for _, h := range [][]string{
			{"X-HTTP-Method-Override", "POST"},
			{"X-HTTP-Method", "patch"},
			{"X-Method-Override", "DELETE"},
			{"X_HTTP_Method_Override", "POST"},
		} {
			r, body := serve(t, g.Handler(), http.MethodGet, "/v1/orders", "", append(bearer, h...)...)
			p := decodeBody(t, body)
			if r.StatusCode != http.StatusBadRequest || p.Type != problem.DefaultBase+"method-override-refused" {
				t.Errorf("GET with %s: %d %s, want 400 method-override-refused", h[0], r.StatusCode, p.Type)
			}
		}
		if len(ran()) != 0 {
			t.Fatalf("the upstream ran %v", ran())
		}
		if r, _ := serve(t, g.Handler(), http.MethodGet, "/v1/orders", "", bearer...); r.StatusCode != http.StatusCreated {
			t.Fatalf("GET without an override: %d", r.StatusCode)
		}
	})
	t.Run("honoured", func(t *testing.T) {
		t.Parallel()
		g, ran := overrideGateway(t, true)
		over := append(bearer, "X-HTTP-Method-Override", "POST")
		r, body := serve(t, g.Handler(), http.MethodGet, "/v1/orders", `{"n":1}`, over...)
		if p := decodeBody(t, body); r.StatusCode != http.StatusBadRequest || p.Type != problem.DefaultBase+"idempotency-key-missing" {
			t.Fatalf("GET as POST without a key: %d %s, want 400 idempotency-key-missing", r.StatusCode, p.Type)
		}
		if len(ran()) != 0 {
			t.Fatalf("the upstream ran %v without a key", ran())
		}
		for range 2 {
			if r, body := serve(t, g.Handler(), http.MethodGet, "/v1/orders", `{"n":1}`, append(over, "Idempotency-Key", "o-1")...); r.StatusCode != http.StatusCreated {
				t.Fatalf("GET as POST with a key: %d %s", r.StatusCode, body)
			}
		}
		if len(ran()) != 1 || ran()[0] != http.MethodPost {
			t.Fatalf("the upstream ran %v, want one POST (the second a replay)", ran())
		}
		if _, err := g.opts.Store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "orders", Key: "o-1"}); err != nil {
			t.Fatalf("no claim: %v", err)
		}
		r, _ = serve(t, g.Handler(), http.MethodGet, "/v1/orders", "", append(bearer, "X-HTTP-Method-Override", "POST", "X-Method-Override", "GET")...)
		if r.StatusCode != http.StatusBadRequest {
			t.Fatalf("two overrides that differ: %d, want 400", r.StatusCode)
		}
	})
}

// A _method query parameter overrides nothing: the request's own method
// decides whether it needs a key, and the parameter goes to the upstream
// as sent, like any other.
func TestMethodQueryParameterIsNotAnOverride(t *testing.T) {
	t.Parallel()
	g, ran := overrideGateway(t, false)
	bearer := []string{"Authorization", "Bearer " + testAPIKey}
	r, body := serve(t, g.Handler(), http.MethodPost, "/v1/orders?_method=GET", "{}", bearer...)
	if p := decodeBody(t, body); r.StatusCode != http.StatusBadRequest || p.Type != problem.DefaultBase+"idempotency-key-missing" {
		t.Fatalf("POST ?_method=GET without a key: %d %s, want 400 idempotency-key-missing", r.StatusCode, p.Type)
	}
	if r, _ := serve(t, g.Handler(), http.MethodGet, "/v1/orders?_method=POST", "", bearer...); r.StatusCode != http.StatusCreated {
		t.Fatalf("GET ?_method=POST without a key: %d, want the upstream's 201", r.StatusCode)
	}
	if got := ran(); !slices.Equal(got, []string{http.MethodGet}) {
		t.Fatalf("the upstream ran %v, want the GET alone", got)
	}
}

// encodingGateway proxies POST /v1/orders to an upstream that records the
// body and Content-Encoding it receives; decode is the route's
// decode_content_encodings.
func encodingGateway(t *testing.T, decode ...string) (*Gateway, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Get("Content-Encoding")+"|"+string(b))
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	opts := testOptions(fakeJobs{})
	opts.Routes = []RouteOptions{{Name: "orders", Path: "/v1/orders", Upstream: u,
		Idempotency: idempotency.Config{DecodeContentEncodings: decode}}}
	return newTestGateway(t, opts), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// encoded is b written through the compressor w makes.
func encoded[W io.WriteCloser](t *testing.T, w func(io.Writer) W, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := w(&buf)
	_, _ = zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func gzipped(t *testing.T, b []byte) string  { return encoded(t, gzip.NewWriter, b) }
func deflated(t *testing.T, b []byte) string { return encoded(t, zlib.NewWriter, b) }

// Finding 5: a compressed body is refused unless the route decodes it; a
// route that does limits the decoded size, fingerprints and forwards the
// decoded body.
func TestContentEncoding(t *testing.T) {
	t.Parallel()
	post := func(g *Gateway, key, encoding, body string) (*http.Response, openapi.Problem) {
		r, b := serve(t, g.Handler(), http.MethodPost, "/v1/orders", body,
			"Authorization", "Bearer "+testAPIKey, "Idempotency-Key", key, "Content-Type", "application/json", "Content-Encoding", encoding)
		var p openapi.Problem
		if r.Header.Get("Content-Type") == "application/problem+json" {
			p = decodeBody(t, b)
		}
		return r, p
	}
	bomb := gzipped(t, bytes.Repeat([]byte(" "), 8<<20))
	if len(bomb) > 16<<10 {
		t.Fatalf("the bomb is %d bytes", len(bomb))
	}
	t.Run("refused by default", func(t *testing.T) {
		t.Parallel()
		g, got := encodingGateway(t)
		for _, body := range []string{bomb, gzipped(t, []byte(`{"n":1}`))} {
			r, p := post(g, "k", "gzip", body)
			if r.StatusCode != http.StatusUnsupportedMediaType || p.Type != problem.DefaultBase+"unsupported-content-encoding" {
				t.Fatalf("gzip body: %d %s, want 415 unsupported-content-encoding", r.StatusCode, p.Type)
			}
			if ae := r.Header.Get("Accept-Encoding"); ae != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", ae)
			}
		}
		if r, _ := post(g, "k2", "identity", `{"n":1}`); r.StatusCode != http.StatusCreated {
			t.Fatalf("identity: %d", r.StatusCode)
		}
		if n := len(got()); n != 1 {
			t.Fatalf("the upstream received %d requests, want the identity one", n)
		}
	})
	t.Run("decoded", func(t *testing.T) {
		t.Parallel()
		g, got := encodingGateway(t, "gzip", "deflate")
		if r, p := post(g, "bomb", "gzip", bomb); r.StatusCode != http.StatusRequestEntityTooLarge || p.Type != problem.DefaultBase+"request-too-large" {
			t.Fatalf("8 KB inflating to 8 MiB: %d %s, want 413 request-too-large", r.StatusCode, p.Type)
		}
		doc := []byte(`{"order":"o-1","amount":5}`)
		if r, _ := post(g, "o-1", "gzip", gzipped(t, doc)); r.StatusCode != http.StatusCreated {
			t.Fatalf("gzip: %d", r.StatusCode)
		}
		// The same document, deflated: one fingerprint, so a replay.
		r, p := post(g, "o-1", "deflate", deflated(t, doc))
		if r.StatusCode != http.StatusCreated || r.Header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("deflate, same key: %d %s replayed=%q, want the replay", r.StatusCode, p.Type, r.Header.Get(idempotency.HeaderReplayed))
		}
		if r, _ := post(g, "o-1", "", string(doc)); r.Header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("identity, same key: %d, want the replay", r.StatusCode)
		}
		if g := got(); len(g) != 1 || g[0] != "|"+string(doc) {
			t.Fatalf("the upstream received %q, want the decoded document once, without Content-Encoding", g)
		}
		if r, p := post(g, "br", "br", "x"); r.StatusCode != http.StatusUnsupportedMediaType || r.Header.Get("Accept-Encoding") != "identity, gzip, deflate" {
			t.Fatalf("br: %d %s Accept-Encoding %q", r.StatusCode, p.Type, r.Header.Get("Accept-Encoding"))
		}
	})
}
