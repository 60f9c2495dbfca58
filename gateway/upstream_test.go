package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// partner is an upstream that, like most partner APIs, scopes keys to the
// account calling it (the gateway): a repeated Idempotency-Key gets the
// first answer back. It records what each call carried.
type partner struct {
	srv    *httptest.Server
	answer func(w http.ResponseWriter, r *http.Request) bool // true: answered

	mu    sync.Mutex
	calls []partnerCall
	byKey map[string]string
}

type partnerCall struct {
	method, path string // path as sent (escaped)
	header       http.Header
}

func newPartner(t *testing.T) *partner {
	p := &partner{byKey: map[string]string{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.calls = append(p.calls, partnerCall{method: r.Method, path: r.URL.EscapedPath(), header: r.Header.Clone()})
		n := len(p.calls)
		p.mu.Unlock()
		if p.answer != nil && p.answer(w, r) {
			return
		}
		key := r.Header.Get("Idempotency-Key")
		p.mu.Lock()
		body, seen := p.byKey[key]
		if !seen && key != "" {
			body = fmt.Sprintf(`{"charge":"ch_%d","tenant":%q}`, n, r.Header.Get(HeaderTenant))
			p.byKey[key] = body
		}
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *partner) url() *url.URL {
	u, _ := url.Parse(p.srv.URL)
	return u
}

func (p *partner) received() []partnerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]partnerCall(nil), p.calls...)
}

// keys lists the Idempotency-Key lines of every call, "-" for none.
func (p *partner) keys() []string {
	var out []string
	for _, c := range p.received() {
		vs := c.header.Values("Idempotency-Key")
		if len(vs) == 0 {
			out = append(out, "-")
			continue
		}
		out = append(out, strings.Join(vs, "|"))
	}
	return out
}

const globexKey = "globex-key"

// partnerGateway is testOptions with a second tenant, globex, and the
// routes given, each proxied to p unless it says otherwise.
func partnerGateway(t *testing.T, p *partner, routes ...RouteOptions) *Gateway {
	t.Helper()
	opts := testOptions(fakeJobs{})
	opts.Auth.Tenants = append(opts.Auth.Tenants, auth.TenantKeys{Name: "globex", APIKeySHA256s: []string{hexSum(globexKey)}})
	for _, ro := range routes {
		if ro.Upstream == nil && ro.Handler == nil {
			ro.Upstream = p.url()
		}
		opts.Routes = append(opts.Routes, ro)
	}
	return newTestGateway(t, opts)
}

var payments = RouteOptions{Name: "payments", Methods: []string{http.MethodPost}, Path: "/v1/payments", Prefix: true}

// Row 1: one key from two tenants is two keys at the upstream, so neither
// gets the other's charge; a route with forward_key as_sent forwards the
// canonical key alone.
func TestUpstreamKeyIsScopedToTheTenant(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	partnerRoute := RouteOptions{Name: "partner", Methods: []string{http.MethodPost}, Path: "/v1/partner",
		Idempotency: idempotency.Config{ForwardKey: idempotency.ForwardAsSent}}
	g := partnerGateway(t, p, payments, partnerRoute)

	a, aBody := serve(t, g.Handler(), http.MethodPost, "/v1/payments", `{"amount":1}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "same")
	b, bBody := serve(t, g.Handler(), http.MethodPost, "/v1/payments", `{"amount":1}`, "Authorization", "Bearer "+globexKey, "Idempotency-Key", "same")
	if a.StatusCode != 201 || b.StatusCode != 201 || aBody == bBody || !strings.Contains(bBody, `"tenant":"globex"`) {
		t.Fatalf("acme %d %s, globex %d %s: globex must get its own charge", a.StatusCode, aBody, b.StatusCode, bBody)
	}
	serve(t, g.Handler(), http.MethodPost, "/v1/partner", `{}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", `"quoted"`)
	want := []string{"acme:same", "globex:same", "quoted"}
	if got := p.keys(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the upstream got keys %q, want %q", got, want)
	}
}

// Without a claim (a method that needs no key) the key a client sends is
// scoped the same way, and one that is not a valid key is not forwarded.
func TestUpstreamKeyWithoutAClaim(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	g := partnerGateway(t, p, RouteOptions{Name: "open", Path: "/v1/open"})
	serve(t, g.Handler(), http.MethodPut, "/v1/open", `{}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", `"put-1"`)
	serve(t, g.Handler(), http.MethodDelete, "/v1/open", "", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "a, b")
	serve(t, g.Handler(), http.MethodGet, "/v1/open", "", "Authorization", "Bearer "+testAPIKey)
	want := []string{"acme:put-1", "-", "-"}
	if got := p.keys(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the upstream got keys %q, want %q", got, want)
	}
	for _, c := range p.received() {
		if c.header.Get(HeaderFencingToken) != "" {
			t.Errorf("%s without a claim carried a fencing token", c.method)
		}
	}
}

// Row 2: the bare and the quoted form are one key at the gateway, so they
// must be one key at the upstream too, whatever the header looked like.
func TestUpstreamKeyIsCanonical(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	var answered atomic.Bool
	p.answer = func(w http.ResponseWriter, r *http.Request) bool {
		if !answered.Swap(true) { // not processed: the key is released and the retry runs
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	g := partnerGateway(t, p, payments)
	if r, _ := serve(t, g.Handler(), http.MethodPost, "/v1/payments", `{}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "qk-1"); r.StatusCode != 503 {
		t.Fatalf("first: %d, want the upstream's 503", r.StatusCode)
	}
	if r, _ := serve(t, g.Handler(), http.MethodPost, "/v1/payments", `{}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", `"qk-1"`); r.StatusCode != 201 {
		t.Fatalf("retry: %d, want 201", r.StatusCode)
	}
	want := []string{"acme:qk-1", "acme:qk-1"}
	if got := p.keys(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the upstream got keys %q, want %q", got, want)
	}
	first, retry := p.received()[0].header.Get(HeaderFencingToken), p.received()[1].header.Get(HeaderFencingToken)
	if tokenOf(retry) <= tokenOf(first) {
		t.Errorf("retry's fencing token %q, want one above the first run's %q", retry, first)
	}
}

// Row 4: headers a client names in Connection are removed before Rewrite
// runs; the key, the token and the tenant are set after that, so they
// always reach the upstream.
func TestConnectionCannotStripTheKey(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	g := partnerGateway(t, p, payments)
	r, body := serve(t, g.Handler(), http.MethodPost, "/v1/payments", `{}`, "Authorization", "Bearer "+testAPIKey,
		"Idempotency-Key", "conn-1", "Connection", "Idempotency-Key, X-Request-Id",
		"Connection", "Idempotency-Fencing-Token, Idemgate-Tenant")
	if r.StatusCode != 201 {
		t.Fatalf("%d %s", r.StatusCode, body)
	}
	h := p.received()[0].header
	if h.Get("Idempotency-Key") != "acme:conn-1" || tokenOf(h.Get(HeaderFencingToken)) == 0 || h.Get(HeaderTenant) != "acme" {
		t.Fatalf("the upstream got key %q token %q tenant %q", h.Get("Idempotency-Key"), h.Get(HeaderFencingToken), h.Get(HeaderTenant))
	}
}

// Row 9: a header the gateway owns, spelt with "_" or in another case,
// never reaches the upstream next to (or instead of) the gateway's own.
func TestOwnedHeadersInOtherSpellings(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	g := partnerGateway(t, p, payments)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{}`))
	for name, v := range map[string]string{
		"Authorization": "Bearer " + testAPIKey, "Idempotency-Key": "us-1",
		"Idemgate_Tenant": "globex", "Idempotency_Fencing_Token": "99", "Idempotency_Key": "other",
		"IDEMGATE_TASK": "x", "X_Forwarded_For": "10.0.0.1", "X-Custom_Header": "kept",
		"X-Forwarded-For": "10.0.0.2", "X-Forwarded-Proto": "https",
	} {
		req.Header[name] = []string{v} // as spelt, not canonicalised
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("%d", resp.StatusCode)
	}
	h := p.received()[0].header
	for name, vs := range h {
		n := readAs(name)
		if n == "authorization" {
			t.Errorf("the tenant's credentials reached the upstream")
		}
		if strings.Contains(name, "_") && n != "x-custom-header" {
			t.Errorf("%s: %q reached the upstream", name, vs)
		}
	}
	if h.Get(HeaderTenant) != "acme" || tokenOf(h.Get(HeaderFencingToken)) == 0 || h.Get("Idempotency-Key") != "acme:us-1" || h.Get("X-Custom_Header") != "kept" {
		t.Errorf("the upstream got %v", h)
	}
	// The forwarding headers are the gateway's account of the client,
	// never the client's own.
	xff, host, proto := h.Values("X-Forwarded-For"), h.Values("X-Forwarded-Host"), h.Values("X-Forwarded-Proto")
	if len(xff) != 1 || xff[0] != "127.0.0.1" || len(host) != 1 || host[0] != strings.TrimPrefix(srv.URL, "http://") ||
		len(proto) != 1 || proto[0] != "http" {
		t.Errorf("the upstream got X-Forwarded-For %q, X-Forwarded-Host %q, X-Forwarded-Proto %q", xff, host, proto)
	}
}

// Row 12: only the gateway marks an answer as a replay. An upstream's own
// Idempotent-Replayed (or Idempotent-Body-Omitted) on a fresh answer
// reaches neither the client nor the record.
func TestUpstreamReplayMarksAreDropped(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	p.answer = func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Idempotent-Body-Omitted", "true")
		w.Header().Set("Idempotent_Replayed", "true")
		w.Header().Set("X-Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
		return true
	}
	g := partnerGateway(t, p, payments)
	send := func() *http.Response {
		r, _ := serve(t, g.Handler(), http.MethodPost, "/v1/payments", `{}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "rp-1")
		return r
	}
	fresh := send()
	for name := range fresh.Header {
		if strings.Contains(readAs(name), "idempotent-") {
			t.Errorf("a fresh answer carries %s", name)
		}
	}
	replay := send()
	if replay.Header.Get("Idempotent-Replayed") != "true" || replay.Header.Get("Idempotent-Body-Omitted") != "" || len(replay.Header.Values("Idempotent-Replayed")) != 1 {
		t.Errorf("replay headers %v, want the gateway's one Idempotent-Replayed", replay.Header)
	}
	rec, err := g.opts.Store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "payments", Key: "rp-1"})
	if err != nil || rec.Response == nil {
		t.Fatalf("record %+v, %v", rec, err)
	}
	for name := range rec.Response.Header {
		if strings.Contains(readAs(name), "idempotent-") {
			t.Errorf("the record stored the upstream's %s", name)
		}
	}
	if len(p.received()) != 1 {
		t.Errorf("the upstream was called %d times", len(p.received()))
	}
}

// Row 7: RFC 9110 methods are case-sensitive, so "post" is not POST and
// nothing says it is safe: on a route without methods it needs a key like
// any method that is not a standard one, and never goes upstream without
// a claim.
func TestNonStandardMethodsNeedAKey(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	g := partnerGateway(t, p, RouteOptions{Name: "any", Path: "/v1/any", Prefix: true})
	for _, m := range []string{"post", "patch", "Post", "PURGE"} {
		r, body := serve(t, g.Handler(), m, "/v1/any", `{}`, "Authorization", "Bearer "+testAPIKey)
		if r.StatusCode != 400 || !strings.Contains(body, "idempotency-key-missing") {
			t.Errorf("%s without a key: %d %s, want 400 idempotency-key-missing", m, r.StatusCode, body)
		}
	}
	if n := len(p.received()); n != 0 {
		t.Fatalf("%d requests went upstream without a key", n)
	}
	r, _ := serve(t, g.Handler(), "post", "/v1/any", `{}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "lc-1")
	calls := p.received()
	if r.StatusCode != 201 || len(calls) != 1 || calls[0].header.Get("Idempotency-Key") != "acme:lc-1" || tokenOf(calls[0].header.Get(HeaderFencingToken)) == 0 {
		t.Fatalf("post with a key: %d, upstream calls %d", r.StatusCode, len(calls))
	}
	// The standard safe and idempotent methods still pass untouched.
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		if r, _ := serve(t, g.Handler(), m, "/v1/any", "", "Authorization", "Bearer "+testAPIKey); r.StatusCode != 201 {
			t.Errorf("%s without a key: %d, want it forwarded", m, r.StatusCode)
		}
	}
}

// Row 8: two credential lines are refused at the gateway too.
func TestRepeatedAuthorizationIsRefused(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	g := partnerGateway(t, p, payments)
	r, body := serve(t, g.Handler(), http.MethodPost, "/v1/payments", `{}`, "Authorization", "Bearer "+testAPIKey,
		"Authorization", "Bearer "+globexKey, "Idempotency-Key", "two-auth")
	if r.StatusCode != 401 || !strings.Contains(body, "unauthorized") || len(p.received()) != 0 {
		t.Fatalf("two Authorization lines: %d %s, upstream calls %d; want 401 and none", r.StatusCode, body, len(p.received()))
	}
}

// Row 3: a path that is not in normal form is refused before routing, so
// a request matched as one route never reaches another path upstream
// (and nothing is stored for it); an encoded slash is not a separator.
func TestAbnormalPathsAreRefused(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	p.answer = func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.EscapedPath(), "payments") && strings.HasPrefix(r.URL.EscapedPath(), "/v1/echo") {
			w.Header().Set("Location", "/v1/payments")
			w.WriteHeader(http.StatusTemporaryRedirect)
			return true
		}
		return false
	}
	charges := RouteOptions{Name: "charges", Methods: []string{http.MethodPost}, Path: "/v1/payments/charges"}
	echo := RouteOptions{Name: "echo", Methods: []string{http.MethodPost}, Path: "/v1/echo", Prefix: true}
	g := partnerGateway(t, p, payments, charges, echo)
	post := func(path, key string) (*http.Response, string) {
		return serve(t, g.Handler(), http.MethodPost, path, `{}`, "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", key)
	}
	for i, path := range []string{
		"/v1/echo/../payments",
		"/v1/payments/%2e%2e/jobs/abc",
		"/v1/payments/%2E%2E",
		"/v1/echo/./x",
		"/v1/payments/..;/charges",
		"/v1//payments",
		"/v1/echo/a%2F..%2Fpayments",
		"/v1/echo/a%5C..%5Cpayments",
	} {
		key := fmt.Sprintf("path-%d", i)
		r, body := post(path, key)
		if r.StatusCode != 400 || !strings.Contains(body, "/problems/bad-request") || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("POST %s: %d %s, want 400 bad-request", path, r.StatusCode, body)
		}
		for _, route := range []string{"payments", "charges", "echo"} {
			if _, err := g.opts.Store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: route, Key: key}); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("POST %s: a record was stored on %s (%v)", path, route, err)
			}
		}
	}
	if calls := p.received(); len(calls) != 0 {
		t.Fatalf("refused paths reached the upstream: %+v", calls)
	}

	// Normal paths, a trailing slash, and encoded slashes kept as sent.
	for _, tc := range []struct{ path, route string }{
		{"/v1/payments/", "payments"},
		{"/v1/payments/ch%2Fa", "payments"},
		{"/v1/payments%2Fcharges", ""}, // one segment: not /v1/payments/…
		{"/v1/payments/charges", "charges"},
		{"/v1/payments/...", "payments"},
	} {
		before := len(p.received())
		r, body := post(tc.path, "ok-"+tc.path)
		calls := p.received()
		switch {
		case tc.route == "":
			if r.StatusCode != 404 || len(calls) != before {
				t.Errorf("POST %s: %d %s, want 404 and no upstream call", tc.path, r.StatusCode, body)
			}
		case r.StatusCode != 201 || len(calls) != before+1:
			t.Errorf("POST %s: %d %s, want it forwarded", tc.path, r.StatusCode, body)
		case calls[before].path != tc.path:
			t.Errorf("POST %s reached the upstream as %s", tc.path, calls[before].path)
		}
		if tc.route != "" {
			if _, err := g.opts.Store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: tc.route, Key: "ok-" + tc.path}); err != nil {
				t.Errorf("POST %s: no record on route %s: %v", tc.path, tc.route, err)
			}
		}
	}
}

// echoGateway is the test gateway with one more route, POST /v1/echo,
// whose handler answers 201.
func echoGateway(t *testing.T) *Gateway {
	t.Helper()
	opts := testOptions(fakeJobs{})
	opts.Routes = append(opts.Routes, RouteOptions{Name: "echo", Methods: []string{http.MethodPost}, Path: "/v1/echo",
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })})
	return newTestGateway(t, opts)
}

// Row 10: each segment of an admin path is decoded once: the key pct%41,
// sent as pct%2541, is not the key pctA.
func TestAdminKeyDecodedOnce(t *testing.T) {
	t.Parallel()
	g := echoGateway(t)
	keys := []string{"pct%41", "pctA", "a/b", "a%2Fb"}
	for _, k := range keys {
		if r, body := serve(t, g.Handler(), http.MethodPost, "/v1/echo", "", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", k); r.StatusCode != 201 {
			t.Fatalf("key %s: %d %s", k, r.StatusCode, body)
		}
	}
	exists := func(k string) bool {
		_, err := g.opts.Store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "echo", Key: k})
		return err == nil
	}
	admin := []string{"Authorization", "Bearer " + testAdminToken}
	alive := map[string]bool{}
	for _, k := range keys {
		alive[k] = true
	}
	for _, tc := range []struct{ segment, key string }{
		{"pct%2541", "pct%41"},
		{"a%252Fb", "a%2Fb"},
		{"a%2Fb", "a/b"},
		{"pct%41", "pctA"},
	} {
		if r, body := serve(t, g.AdminHandler(), http.MethodGet, "/admin/keys/acme/echo/"+tc.segment, "", admin...); r.StatusCode != 200 || !strings.Contains(body, fmt.Sprintf(`"key": %q`, tc.key)) {
			t.Errorf("GET …/%s: %d %s, want the record of %s", tc.segment, r.StatusCode, body, tc.key)
		}
		if r, body := serve(t, g.AdminHandler(), http.MethodDelete, "/admin/keys/acme/echo/"+tc.segment, "", admin...); r.StatusCode != 204 {
			t.Fatalf("DELETE …/%s: %d %s", tc.segment, r.StatusCode, body)
		}
		delete(alive, tc.key)
		for _, k := range keys {
			if exists(k) != alive[k] {
				t.Errorf("after DELETE …/%s: record %s exists=%v, want %v", tc.segment, k, exists(k), alive[k])
			}
		}
	}
}

// Row 11: a state-changing admin request a browser sends from another
// origin is refused, even with the Basic credentials it remembers; the
// same origin, the CLI and curl (neither Origin nor Sec-Fetch-Site) work.
func TestAdminRefusesCrossOrigin(t *testing.T) {
	t.Parallel()
	g := echoGateway(t)
	var paused atomic.Int64
	g.AdminMount("/admin/queues", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paused.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(g.AdminHandler())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	basic := func(r *http.Request) { r.SetBasicAuth("admin", testAdminToken) }
	doProblem := func(method, path string, header ...string) (*http.Response, openapi.Problem) {
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader("x=1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		basic(req)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var p openapi.Problem
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			_ = json.NewDecoder(resp.Body).Decode(&p)
		}
		return resp, p
	}
	do := func(method, path string, header ...string) *http.Response {
		r, _ := doProblem(method, path, header...)
		return r
	}
	const pause = "/admin/queues/api/queues/default:pause"
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"evil origin", []string{"Origin", "http://evil.example"}},
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site"}},
		{"same-site fetch", []string{"Sec-Fetch-Site", "same-site", "Origin", "http://other." + host}},
	} {
		r, p := doProblem(http.MethodPost, pause, tc.header...)
		if r.StatusCode != 403 || p.Type != problem.DefaultBase+"forbidden" {
			t.Errorf("%s: POST %s: %d %s, want 403 forbidden", tc.name, pause, r.StatusCode, p.Type)
		}
	}
	if n := paused.Load(); n != 0 {
		t.Fatalf("the queue was paused %d times by cross-origin requests", n)
	}
	// The admin API itself: the record stays.
	serve(t, g.Handler(), http.MethodPost, "/v1/echo", "", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "keep")
	if r, p := doProblem(http.MethodDelete, "/admin/keys/acme/echo/keep", "Origin", "http://evil.example"); r.StatusCode != 403 || p.Type != problem.DefaultBase+"forbidden" {
		t.Errorf("cross-origin DELETE of a key: %d %s, want 403 forbidden", r.StatusCode, p.Type)
	}
	if _, err := g.opts.Store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "echo", Key: "keep"}); err != nil {
		t.Fatalf("a cross-origin DELETE removed the record: %v", err)
	}

	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"curl", nil},
		{"same origin", []string{"Origin", srv.URL}},
		{"the queue UI", []string{"Sec-Fetch-Site", "same-origin", "Origin", srv.URL}},
		{"typed in the address bar", []string{"Sec-Fetch-Site", "none"}},
	} {
		if r := do(http.MethodPost, pause, tc.header...); r.StatusCode != 204 {
			t.Errorf("%s: POST %s: %d, want 204", tc.name, pause, r.StatusCode)
		}
	}
	if r := do(http.MethodGet, "/metrics", "Origin", "http://evil.example"); r.StatusCode != 200 {
		t.Errorf("a cross-origin GET (safe) of /metrics: %d, want 200", r.StatusCode)
	}
	if r := do(http.MethodDelete, "/admin/keys/acme/echo/keep"); r.StatusCode != 204 {
		t.Errorf("DELETE of a key without a browser: %d, want 204", r.StatusCode)
	}
}

// tokenOf is a fencing token header's value, 0 when it is not a positive
// 64-bit integer: a token is the store's clock in microseconds or one more
// than the key's last, so a test compares tokens rather than expect one.
func tokenOf(h string) int64 {
	n, err := strconv.ParseInt(h, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
