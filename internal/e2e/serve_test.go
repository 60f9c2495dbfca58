package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// upstream is the service behind the gateway. It counts calls per
// (path, key) and remembers the headers each call carried. The key is the
// client's: the gateway forwards it scoped to the tenant ("acme:k"), and
// the prefix naming the Idemgate-Tenant the call carried is taken off.
type upstream struct {
	mu    sync.Mutex
	calls map[string][]http.Header
	srv   *httptest.Server
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{calls: map[string][]http.Header{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) count(path, key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.calls[path+" "+key])
}

func (u *upstream) headers(path, key string) []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.calls[path+" "+key]...)
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := strings.TrimPrefix(r.Header.Get("Idempotency-Key"), r.Header.Get("Idemgate-Tenant")+":")
	u.mu.Lock()
	id := r.URL.Path + " " + key
	u.calls[id] = append(u.calls[id], r.Header.Clone())
	n := len(u.calls[id])
	u.mu.Unlock()
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/slow"):
		// Only the first call of a key is slow.
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		if n == 1 {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	case r.URL.Path == "/v1/flaky":
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
	case r.URL.Path == "/v1/big":
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(bytes.Repeat([]byte("x"), 2<<20))
		return
	case r.URL.Path == "/v1/hang":
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", r.URL.Path+"/obj_"+strconv.Itoa(n))
	w.Header().Set("ETag", `"v`+strconv.Itoa(n)+`"`)
	w.Header().Set("Set-Cookie", "upstream=1")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"call": n, "key": key, "fencing_token": r.Header.Get("Idempotency-Fencing-Token"), "body": string(body),
	})
}

const adminToken = "admin-secret"

// configHead starts a test configuration: listeners on free ports, the
// admin token, and the stores.
func configHead(store, dbURL, redisURL string) string {
	return fmt.Sprintf(`listen: "127.0.0.1:0"
admin_listen: "127.0.0.1:0"
admin_token_sha256: %q
store: %s
database_url: %q
redis_url: %q
`, sha(adminToken), store, dbURL, redisURL)
}

// writeConfig writes a gateway configuration in front of up.
func writeConfig(t *testing.T, store, dbURL, redisURL, upURL string, extra string) string {
	t.Helper()
	cfg := configHead(store, dbURL, redisURL) + fmt.Sprintf(`auth: {mode: api_key}
tenants:
  - name: acme
    api_key_sha256: [%q]
  - name: globex
    api_key_sha256: [%q]
  - name: tiny
    api_key_sha256: [%q]
    rate_limit: {tokens: 2, interval: 1h}
idempotency:
  max_request_bytes: 4096
server:
  shutdown_timeout: 20s
routes:
  - {name: payments, methods: [POST], path_prefix: /v1/payments, upstream: %q}
  - {name: payments-v2, methods: [POST], path: /v2/payments, upstream: %q}
  - {name: slow, methods: [POST], path: /v1/slow, upstream: %q, idempotency: {lease: 2s}}
  - {name: held, methods: [POST], path: /v1/slow/held, upstream: %q}
  - {name: flaky, methods: [POST], path: /v1/flaky, upstream: %q}
  - {name: big, methods: [POST], path: /v1/big, upstream: %q, idempotency: {max_stored_response_bytes: 1024}}
  - {name: hang, methods: [POST], path: /v1/hang, upstream: %q, timeout: 300ms, idempotency: {on_ambiguous: hold}}
  - {name: dead, methods: [POST], path: /v1/dead, upstream: "http://127.0.0.1:1"}
%s`, sha("acme-key"), sha("globex-key"), sha("tiny-key"),
		upURL, upURL, upURL, upURL, upURL, upURL, upURL, extra)
	return writeFile(t, "idemgate.yaml", cfg)
}

// gateway is one running `idemgate serve`.
type gatewayProc struct {
	public, admin string
	stop          func() error
}

// startGateway runs `idemgate serve` in this process through run.
func startGateway(t *testing.T, cfgPath string) *gatewayProc {
	t.Helper()
	p := runInProcess("serve", "--config", cfgPath)
	var a map[string]string
	testkit.Eventually(t, "gateway listening", 30*time.Second, func() bool {
		select {
		case err := <-p.done:
			t.Fatalf("gateway exited early: %v\n%s", err, p.errOut)
		default:
		}
		a = addrs(p.out.String())
		return a["public"] != "" && a["admin"] != ""
	})
	g := &gatewayProc{public: a["public"], admin: a["admin"], stop: p.stop}
	t.Cleanup(func() {
		_ = g.stop()
		if t.Failed() {
			t.Logf("gateway log:\n%s", p.errOut)
		}
	})
	return g
}

// startChild runs `idemgate serve` as a separate process, so it can be
// killed without a chance to clean up.
func startChild(t *testing.T, cfgPath string) (*gatewayProc, *exec.Cmd) {
	t.Helper()
	cmd := childCommand("serve", "--config", cfgPath)
	out := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var a map[string]string
	testkit.Eventually(t, "child gateway listening", 60*time.Second, func() bool {
		a = addrs(out.String())
		return a["public"] != ""
	})
	return &gatewayProc{public: a["public"], admin: a["admin"]}, cmd
}

type req struct {
	path, key, apiKey, body string
	header                  http.Header
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) problem(t *testing.T) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d: Content-Type %q, want application/problem+json; body %s", r.status, ct, r.body)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	for _, f := range []string{"type", "title", "status", "detail", "instance", "request_id", "retryable"} {
		if _, ok := p[f]; !ok {
			t.Fatalf("problem %s lacks %q", r.body, f)
		}
	}
	if p["request_id"] != r.header.Get("X-Request-Id") {
		t.Fatalf("problem request_id %v differs from X-Request-Id %q", p["request_id"], r.header.Get("X-Request-Id"))
	}
	return p
}

func (r resp) problemType(t *testing.T) string {
	t.Helper()
	return strings.TrimPrefix(r.problem(t)["type"].(string), "https://idemgate.dev/problems/")
}

var client = &http.Client{Timeout: 60 * time.Second}

func send(t *testing.T, base string, q req) resp {
	t.Helper()
	r, err := sendErr(base, q)
	if err != nil {
		t.Fatalf("POST %s: %v", q.path, err)
	}
	return r
}

func sendErr(base string, q req) (resp, error) {
	if q.body == "" {
		q.body = `{"amount_cents":100,"currency":"EUR"}`
	}
	hr, _ := http.NewRequest(http.MethodPost, base+q.path, strings.NewReader(q.body))
	hr.Header.Set("Content-Type", "application/json")
	if q.apiKey == "" {
		q.apiKey = "acme-key"
	}
	if q.apiKey != "-" {
		hr.Header.Set("Authorization", "Bearer "+q.apiKey)
	}
	if q.key != "" {
		hr.Header.Set("Idempotency-Key", q.key)
	}
	for k, vs := range q.header {
		hr.Header[k] = vs
	}
	res, err := client.Do(hr)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}, err
}

func adminDo(t *testing.T, g *gatewayProc, method, path, token string) resp {
	t.Helper()
	hr, _ := http.NewRequest(method, g.admin+path, nil)
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	return roundTrip(t, client, hr)
}

// roundTrip sends hr with c and reads the whole answer.
func roundTrip(t *testing.T, c *http.Client, hr *http.Request) resp {
	t.Helper()
	res, err := c.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// storeSetup gives each store variant its configuration.
type storeSetup struct {
	name            string
	dbURL, redisURL string
	shared          bool // records survive the process
}

func storeSetups(t *testing.T) []storeSetup {
	return []storeSetup{
		{name: "postgres", dbURL: testkit.Postgres(t, exampleTables()), redisURL: testkit.RedisURL(t), shared: true},
		{name: "redis", dbURL: testkit.Postgres(t, exampleTables()), redisURL: testkit.RedisURL(t), shared: true},
		{name: "memory", redisURL: testkit.RedisURL(t)},
	}
}

func TestServeEndToEnd(t *testing.T) {
	for _, st := range storeSetups(t) {
		t.Run(st.name, func(t *testing.T) {
			up := newUpstream(t)
			cfg := writeConfig(t, st.name, st.dbURL, st.redisURL, up.srv.URL, "")
			g := startGateway(t, cfg)
			run := randomID() // keys are unique per run: stores outlive tests
			k := func(s string) string { return run + "-" + s }

			t.Run("status table", func(t *testing.T) { testStatusTable(t, g, up, k) })
			t.Run("replay fidelity", func(t *testing.T) { testReplayFidelity(t, g, up, k) })
			t.Run("isolation", func(t *testing.T) { testIsolation(t, g, up, k) })
			t.Run("release and oversize", func(t *testing.T) { testReleaseAndOversize(t, g, up, k) })
			t.Run("slow request keeps its lease", func(t *testing.T) { testSlowLease(t, g, up, k) })
			t.Run("admin", func(t *testing.T) { testAdmin(t, g, k) })
			t.Run("graceful shutdown completes in-flight requests", func(t *testing.T) {
				key := k("drain")
				done := make(chan resp, 1)
				go func() { done <- send(t, g.public, req{path: "/v1/slow/held?ms=1000", key: key}) }()
				testkit.Eventually(t, "upstream got the request", 20*time.Second, func() bool { return up.count("/v1/slow/held", key) == 1 })
				if err := g.stop(); err != nil {
					t.Fatalf("run returned %v on shutdown, want nil", err)
				}
				if r := <-done; r.status != 201 {
					t.Fatalf("in-flight request during shutdown: %d %s", r.status, r.body)
				}
				if !st.shared {
					return
				}
				g2 := startGateway(t, cfg)
				r := send(t, g2.public, req{path: "/v1/slow/held?ms=1000", key: key})
				if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || up.count("/v1/slow/held", key) != 1 {
					t.Fatalf("after restart: %d replayed=%q calls=%d; the drained request's record must be stored", r.status, r.header.Get("Idempotent-Replayed"), up.count("/v1/slow/held", key))
				}
			})
			if st.shared {
				t.Run("killed gateway is taken over", func(t *testing.T) { testKilled(t, cfg, up, k) })
			}
		})
	}
}

func testStatusTable(t *testing.T, g *gatewayProc, up *upstream, k func(string) string) {
	used := k("used")
	if r := send(t, g.public, req{path: "/v1/payments", key: used}); r.status != 201 {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
	// A slow original holds its key for the 409 row.
	inflight := k("inflight")
	slowDone := make(chan resp, 1)
	go func() { slowDone <- send(t, g.public, req{path: "/v1/slow/held?ms=1500", key: inflight}) }()
	testkit.Eventually(t, "slow request reached the upstream", 20*time.Second, func() bool { return up.count("/v1/slow/held", inflight) == 1 })

	hang := k("hang")
	tests := []struct {
		name   string
		q      req
		status int
		slug   string
		retry  bool
	}{
		{"missing key", req{path: "/v1/payments"}, 400, "idempotency-key-missing", false},
		{"invalid key", req{path: "/v1/payments", key: "has space"}, 400, "idempotency-key-invalid", false},
		{"repeated key", req{path: "/v1/payments", header: http.Header{"Idempotency-Key": {"a", "b"}}}, 400, "idempotency-key-invalid", false},
		{"reused key", req{path: "/v1/payments", key: used, body: `{"amount_cents":999}`}, 422, "idempotency-key-reused", false},
		{"in flight", req{path: "/v1/slow/held?ms=1500", key: inflight}, 409, "idempotency-key-in-use", true},
		{"too large", req{path: "/v1/payments", key: k("large"), body: `{"pad":"` + strings.Repeat("x", 5000) + `"}`}, 413, "request-too-large", false},
		{"no credentials", req{path: "/v1/payments", key: k("anon"), apiKey: "-"}, 401, "unauthorized", false},
		{"bad credentials", req{path: "/v1/payments", key: k("bad"), apiKey: "wrong"}, 401, "unauthorized", false},
		{"upstream unreachable", req{path: "/v1/dead", key: k("dead")}, 502, "upstream-unavailable", false},
		{"upstream timeout", req{path: "/v1/hang", key: hang}, 504, "upstream-timeout", false},
		{"outcome unknown", req{path: "/v1/hang", key: hang}, 409, "idempotency-outcome-unknown", false},
		{"no route", req{path: "/nowhere", key: k("nowhere")}, 404, "not-found", false},
	}
	for _, tc := range tests {
		r := send(t, g.public, tc.q)
		if r.status != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.status, r.body)
			continue
		}
		if got := r.problemType(t); got != tc.slug {
			t.Errorf("%s: problem type %q, want %q", tc.name, got, tc.slug)
		}
		if tc.retry && r.header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", tc.name)
		}
		if tc.status >= 500 && strings.Contains(string(r.body), "127.0.0.1") {
			t.Errorf("%s: 5xx detail leaks an internal address: %s", tc.name, r.body)
		}
	}
	if up.count("/v1/payments", used) != 1 || up.count("/v1/hang", hang) != 1 {
		t.Errorf("refused requests reached the upstream")
	}
	if r := send(t, g.public, req{path: "/v1/dead", key: k("dead")}); r.status != 502 || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("unreachable upstream must release the key: retry got %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
	}
	if r := <-slowDone; r.status != 201 {
		t.Errorf("slow original: %d", r.status)
	}

	// Rate limit: tiny has two requests per hour.
	for i := range 3 {
		r := send(t, g.public, req{path: "/v1/payments", key: k("tiny" + strconv.Itoa(i)), apiKey: "tiny-key"})
		for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
			if _, err := strconv.Atoi(r.header.Get(h)); err != nil {
				t.Errorf("request %d: %s = %q, want seconds", i, h, r.header.Get(h))
			}
		}
		if i < 2 && r.status != 201 {
			t.Errorf("tiny request %d: %d", i, r.status)
		}
		if i == 2 {
			if r.status != 429 || r.problemType(t) != "rate-limited" {
				t.Fatalf("third tiny request: %d %s, want 429 rate-limited", r.status, r.body)
			}
			if s, _ := strconv.Atoi(r.header.Get("Retry-After")); s < 1 {
				t.Errorf("429 Retry-After = %q", r.header.Get("Retry-After"))
			}
			if up.count("/v1/payments", k("tiny2")) != 0 {
				t.Error("a rate-limited request reached the upstream")
			}
		}
	}
}

func testReplayFidelity(t *testing.T, g *gatewayProc, up *upstream, k func(string) string) {
	key := k("fidelity")
	first := send(t, g.public, req{path: "/v1/payments/sub", key: `"` + key + `"`, body: `{"amount_cents":100,"currency":"EUR"}`})
	if first.status != 201 || first.header.Get("Location") == "" || first.header.Get("ETag") == "" {
		t.Fatalf("first: %d %v", first.status, first.header)
	}
	// The bare form of the key and a reordered body are the same request.
	again := send(t, g.public, req{path: "/v1/payments/sub", key: key, body: `{ "currency": "EUR", "amount_cents": 100 }`})
	if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d replayed=%q %s", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}
	for _, h := range []string{"Location", "ETag", "Content-Type"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Errorf("replayed %s = %q, want %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	if !bytes.Equal(again.body, first.body) {
		t.Errorf("replayed body %s, want %s", again.body, first.body)
	}
	if again.header.Get("Set-Cookie") != "" || again.header.Get("X-Request-Id") == first.header.Get("X-Request-Id") {
		t.Errorf("replay carried Set-Cookie or the original's request id: %v", again.header)
	}
	if n := up.count("/v1/payments/sub", key); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
	// The key was sent quoted: the upstream gets the canonical key,
	// scoped to the tenant.
	h := up.headers("/v1/payments/sub", key)[0]
	if h.Get("Idempotency-Key") != "acme:"+key || fencingToken(h) < 1 || h.Get("Authorization") != "" || h.Get("Idemgate-Tenant") != "acme" {
		t.Errorf("upstream headers: key %q token %q authorization %q tenant %q", h.Get("Idempotency-Key"), h.Get("Idempotency-Fencing-Token"), h.Get("Authorization"), h.Get("Idemgate-Tenant"))
	}
}

func testIsolation(t *testing.T, g *gatewayProc, up *upstream, k func(string) string) {
	key := k("shared")
	a := send(t, g.public, req{path: "/v1/payments", key: key})
	b := send(t, g.public, req{path: "/v1/payments", key: key, apiKey: "globex-key"})
	c := send(t, g.public, req{path: "/v2/payments", key: key})
	for name, r := range map[string]resp{"acme": a, "globex": b, "other route": c} {
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("%s: %d replayed=%q, want a fresh 201", name, r.status, r.header.Get("Idempotent-Replayed"))
		}
	}
	if up.count("/v1/payments", key) != 2 || up.count("/v2/payments", key) != 1 {
		t.Fatalf("upstream calls: v1 %d v2 %d, want 2 and 1", up.count("/v1/payments", key), up.count("/v2/payments", key))
	}
	// Two tenants never share a key at the upstream.
	if hs := up.headers("/v1/payments", key); hs[0].Get("Idempotency-Key") == hs[1].Get("Idempotency-Key") {
		t.Errorf("both tenants reached the upstream with Idempotency-Key %q", hs[0].Get("Idempotency-Key"))
	}
	if r := send(t, g.public, req{path: "/v1/payments", key: key, apiKey: "globex-key"}); !bytes.Equal(r.body, b.body) {
		t.Error("globex's replay is not globex's response")
	}
}

func testReleaseAndOversize(t *testing.T, g *gatewayProc, up *upstream, k func(string) string) {
	key := k("flaky")
	if r := send(t, g.public, req{path: "/v1/flaky", key: key}); r.status != 503 {
		t.Fatalf("flaky first: %d", r.status)
	}
	r := send(t, g.public, req{path: "/v1/flaky", key: key})
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after an upstream 503 the retry must run again: %d", r.status)
	}
	hs := up.headers("/v1/flaky", key)
	if len(hs) != 2 || hs[0].Get("Idempotency-Key") != "acme:"+key || hs[1].Get("Idempotency-Key") != "acme:"+key || fencingToken(hs[1]) <= fencingToken(hs[0]) {
		t.Fatalf("retry after release: %d calls, second token %q", len(hs), hs[len(hs)-1].Get("Idempotency-Fencing-Token"))
	}

	big := k("big")
	first := send(t, g.public, req{path: "/v1/big", key: big})
	if first.status != 200 || len(first.body) != 2<<20 {
		t.Fatalf("oversized response: %d with %d bytes", first.status, len(first.body))
	}
	again := send(t, g.public, req{path: "/v1/big", key: big})
	if again.status != 200 || again.header.Get("Idempotent-Body-Omitted") != "true" || len(again.body) != 0 {
		t.Fatalf("replay of an oversized response: %d omitted=%q %d bytes", again.status, again.header.Get("Idempotent-Body-Omitted"), len(again.body))
	}
	if up.count("/v1/big", big) != 1 {
		t.Fatalf("oversized response re-executed: %d calls", up.count("/v1/big", big))
	}
}

func testSlowLease(t *testing.T, g *gatewayProc, up *upstream, k func(string) string) {
	// The route's lease is 2s; the upstream takes 5s. Renewal keeps the
	// claim, so retries meanwhile get 409 and never reach the upstream.
	key := k("lease")
	done := make(chan resp, 1)
	go func() { done <- send(t, g.public, req{path: "/v1/slow?ms=5000", key: key}) }()
	testkit.Eventually(t, "slow request reached the upstream", 20*time.Second, func() bool { return up.count("/v1/slow", key) == 1 })
	retries := 0
	for {
		select {
		case r := <-done:
			if r.status != 201 {
				t.Fatalf("slow request: %d", r.status)
			}
			if retries < 3 || up.count("/v1/slow", key) != 1 {
				t.Fatalf("%d retries, %d upstream calls; want several retries and 1 call", retries, up.count("/v1/slow", key))
			}
			return
		default:
		}
		r := send(t, g.public, req{path: "/v1/slow?ms=5000", key: key})
		if r.status != 409 && r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry during the slow request: %d %s", r.status, r.body)
		}
		retries++
		time.Sleep(150 * time.Millisecond)
	}
}

func testAdmin(t *testing.T, g *gatewayProc, k func(string) string) {
	key := k("admin")
	send(t, g.public, req{path: "/v1/payments", key: key})
	if r := adminDo(t, g, "GET", "/admin/keys/acme/payments/"+key, ""); r.status != 401 || r.problemType(t) != "unauthorized" {
		t.Fatalf("admin without token: %d", r.status)
	}
	if r := adminDo(t, g, "GET", "/metrics", "wrong"); r.status != 401 {
		t.Fatalf("metrics with a wrong token: %d", r.status)
	}
	r := adminDo(t, g, "GET", "/admin/keys/acme/payments/"+key, adminToken)
	var doc struct {
		State        string `json:"state"`
		FencingToken int64  `json:"fencing_token"`
		Response     struct {
			Status int `json:"status"`
		} `json:"response"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil || r.status != 200 || doc.State != "completed" || doc.Response.Status != 201 || doc.FencingToken < 1 {
		t.Fatalf("admin get: %d %s", r.status, r.body)
	}
	if r := adminDo(t, g, "POST", "/admin/keys/acme/payments/"+key+"/resolve", adminToken); r.status != 400 {
		t.Fatalf("resolve of a completed record: %d, want 400", r.status)
	}
	// A held outcome is resolved by the operator and the retry runs again.
	hang := k("admin-hang")
	send(t, g.public, req{path: "/v1/hang", key: hang})
	if r := adminDo(t, g, "POST", "/admin/keys/acme/hang/"+hang+"/resolve", adminToken); r.status != 200 || !strings.Contains(string(r.body), `"released"`) {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	if r := send(t, g.public, req{path: "/v1/hang", key: hang}); r.status != 504 {
		t.Fatalf("after resolve the retry must run again: %d", r.status)
	}
	if r := adminDo(t, g, "DELETE", "/admin/keys/acme/payments/"+key, adminToken); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	if r := adminDo(t, g, "GET", "/admin/keys/acme/payments/"+key, adminToken); r.status != 404 {
		t.Fatalf("get after delete: %d", r.status)
	}
	m := adminDo(t, g, "GET", "/metrics", adminToken)
	for _, want := range []string{`idemgate_requests_total{outcome="replay",route="payments"}`, `idemgate_requests_total{outcome="mismatch",route="payments"}`, "idemgate_store_operation_duration_seconds"} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	hr, _ := http.Get(g.public + "/readyz")
	if hr.StatusCode != 200 {
		t.Errorf("/readyz = %d with every store up", hr.StatusCode)
	}
	hr.Body.Close()
}

func testKilled(t *testing.T, cfg string, up *upstream, k func(string) string) {
	key := k("killed")
	if _, err := killMidRequest(t, cfg, up, key); err == nil {
		t.Fatal("the client of a killed gateway got an answer")
	}
	hs := up.headers("/v1/slow", key)
	if len(hs) != 2 || hs[1].Get("Idempotency-Key") != "acme:"+key || fencingToken(hs[1]) <= fencingToken(hs[0]) {
		t.Fatalf("upstream saw %d calls; take-over key %q token %q, want the same key and a higher token",
			len(hs), hs[len(hs)-1].Get("Idempotency-Key"), hs[len(hs)-1].Get("Idempotency-Fencing-Token"))
	}
}

// killMidRequest starts a gateway process on cfg and kills it while it
// forwards a slow request with key. A gateway restarted on the same store
// takes the claim over once the dead one's lease (2s) expires: the retry
// of key on it must succeed. It returns that gateway and what the client
// of the killed one got.
func killMidRequest(t *testing.T, cfg string, up *upstream, key string) (*gatewayProc, error) {
	t.Helper()
	child, cmd := startChild(t, cfg)
	errc := make(chan error, 1)
	go func() {
		_, err := sendErr(child.public, req{path: "/v1/slow?ms=60000", key: key})
		errc <- err
	}()
	testkit.Eventually(t, "the doomed gateway forwarded the request", 30*time.Second, func() bool { return up.count("/v1/slow", key) == 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killedErr := <-errc
	g := startGateway(t, cfg)
	var r resp
	testkit.Eventually(t, "take-over after the lease", 30*time.Second, func() bool {
		r = send(t, g.public, req{path: "/v1/slow?ms=60000", key: key})
		return r.status != 409
	})
	if r.status != 201 {
		t.Fatalf("retry after the crash: %d %s", r.status, r.body)
	}
	return g, killedErr
}

func TestServeStoreDown(t *testing.T) {
	redisURL := testkit.RedisURL(t)
	up := newUpstream(t)
	// Nothing listens on port 1: the store is unreachable from the start.
	cfg := writeConfig(t, "postgres", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1", redisURL, up.srv.URL, "")
	g := startGateway(t, cfg)
	r := send(t, g.public, req{path: "/v1/payments", key: "k"})
	if r.status != 503 || r.problemType(t) != "idempotency-store-unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("store down: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "127.0.0.1") || up.count("/v1/payments", "k") != 0 {
		t.Fatalf("store down: leaked a cause or reached the upstream: %s", r.body)
	}
	if n := requestsTotal(t, g, "payments", "store_error"); n != 1 {
		t.Fatalf("idemgate_requests_total{outcome=\"store_error\"} = %v after one refused request, want 1", n)
	}
	hr, err := http.Get(g.public + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	if hr.StatusCode != 503 {
		t.Fatalf("/readyz = %d with PostgreSQL down, want 503", hr.StatusCode)
	}
}

// fencingToken is the Idempotency-Fencing-Token an upstream received, or 0.
// Its value depends on the store (1 first with PostgreSQL and memory, the
// server's clock with Redis); only its order is the contract.
func fencingToken(h http.Header) int64 {
	n, _ := strconv.ParseInt(h.Get("Idempotency-Fencing-Token"), 10, 64)
	return n
}
