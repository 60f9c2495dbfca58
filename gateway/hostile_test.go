package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
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
			if r.StatusCode != http.StatusBadRequest || p.Type != idempotency.DefaultProblemBase+"method-override-refused" {
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
		if p := decodeBody(t, body); r.StatusCode != http.StatusBadRequest || p.Type != idempotency.DefaultProblemBase+"idempotency-key-missing" {
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
