package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/problem"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a handler that counts executions and answers 201 with a body
// naming the execution and the fencing token it ran under.
type counter struct {
	calls  atomic.Int64
	tokens sync.Map // call number -> fencing token
	delay  time.Duration
	status int
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.calls.Add(1)
	var token int64 // 0: the request ran without a claim (safe method, fail open)
	if a, ok := idempotency.AttemptFrom(r.Context()); ok {
		token = a.FencingToken
	}
	c.tokens.Store(n, token)
	body, _ := io.ReadAll(r.Body)
	if c.delay > 0 {
		select {
		case <-time.After(c.delay):
		case <-r.Context().Done():
			return
		}
	}
	status := c.status
	if status == 0 {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/v1/payments/"+strconv.FormatInt(n, 10))
	w.Header().Set("ETag", `"v`+strconv.FormatInt(n, 10)+`"`)
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("Set-Cookie2", "legacy=secret")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"call": n, "token": token, "echo": string(body)})
}

func newMW(t *testing.T, store idempotency.Store, cfg idempotency.Config) *idempotency.Middleware {
	t.Helper()
	if cfg.Route == "" {
		cfg.Route = "payments"
	}
	if cfg.Tenant == nil {
		cfg.Tenant = func(r *http.Request) string { return r.Header.Get("X-Tenant") }
	}
	mw, err := idempotency.New(store, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return mw
}

type call struct {
	method, key, tenant, body string
	header                    http.Header
}

func do(h http.Handler, c call) *httptest.ResponseRecorder {
	if c.method == "" {
		c.method = http.MethodPost
	}
	if c.body == "" {
		c.body = `{"amount":100}`
	}
	r := httptest.NewRequest(c.method, "/v1/payments", strings.NewReader(c.body))
	r.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		r.Header.Set("Idempotency-Key", c.key)
	}
	if c.tenant == "" {
		c.tenant = "acme"
	}
	r.Header.Set("X-Tenant", c.tenant)
	for k, vs := range c.header {
		r.Header[k] = vs
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func problemType(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("error Content-Type = %q, want application/problem+json (body %s)", ct, w.Body)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body: %v", err)
	}
	if p.Status != w.Code || p.Detail == "" {
		t.Fatalf("problem %+v does not match status %d or lacks a detail", p, w.Code)
	}
	return strings.TrimPrefix(p.Type, problem.DefaultBase)
}

func TestReplayFidelity(t *testing.T) {
	t.Parallel()
	h := &counter{}
	srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(h)
	first := do(srv, call{key: "k1"})
	if first.Code != 201 || first.Header().Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("first response %d replayed=%q", first.Code, first.Header().Get(idempotency.HeaderReplayed))
	}
	for _, key := range []string{"k1", `"k1"`} { // the bare and quoted forms are one key
		again := do(srv, call{key: key})
		if again.Code != 201 || again.Header().Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("replay with key %s: %d replayed=%q", key, again.Code, again.Header().Get(idempotency.HeaderReplayed))
		}
		if !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
			t.Fatalf("replay body %q, want %q", again.Body, first.Body)
		}
		for _, name := range []string{"Location", "ETag", "Content-Type"} {
			if again.Header().Get(name) != first.Header().Get(name) {
				t.Fatalf("replay %s = %q, want %q", name, again.Header().Get(name), first.Header().Get(name))
			}
		}
		for _, name := range []string{"Set-Cookie", "Set-Cookie2"} {
			if again.Header().Get(name) != "" {
				t.Fatalf("%s was replayed", name)
			}
		}
	}
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	h := &counter{delay: 50 * time.Millisecond}
	srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(h)
	const n = 64
	results := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = do(srv, call{key: "same"})
		})
	}
	close(start)
	wg.Wait()
	if c := h.calls.Load(); c != 1 {
		t.Fatalf("%d concurrent identical requests ran the handler %d times, want 1", n, c)
	}
	final := do(srv, call{key: "same"})
	var originals, conflicts, replays int
	for _, w := range results {
		switch {
		case w.Code == 409:
			if problemType(t, w) != "idempotency-key-in-use" || w.Header().Get("Retry-After") == "" {
				t.Fatalf("409 without in-use type or Retry-After: %v %s", w.Header(), w.Body)
			}
			conflicts++
		case w.Code == 201 && w.Header().Get(idempotency.HeaderReplayed) == "true":
			replays++
			if !bytes.Equal(w.Body.Bytes(), final.Body.Bytes()) {
				t.Fatalf("replay differs from the stored response")
			}
		case w.Code == 201:
			originals++
			if !bytes.Equal(w.Body.Bytes(), final.Body.Bytes()) {
				t.Fatalf("original %q differs from the later replay %q", w.Body, final.Body)
			}
		default:
			t.Fatalf("unexpected response %d %s", w.Code, w.Body)
		}
	}
	if originals != 1 || conflicts+replays != n-1 {
		t.Fatalf("originals=%d conflicts=%d replays=%d", originals, conflicts, replays)
	}
}

func TestSlowHandlerKeepsItsLease(t *testing.T) {
	t.Parallel()
	h := &counter{delay: 1500 * time.Millisecond}
	srv := newMW(t, memstore.New(), idempotency.Config{Lease: 300 * time.Millisecond}).Wrap(h)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(srv, call{key: "slow"}) }()
	// Keep retrying for several lease lengths while the first still runs.
	deadline := time.Now().Add(time.Second)
	retries := 0
	for time.Now().Before(deadline) {
		if h.calls.Load() == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		w := do(srv, call{key: "slow"})
		if w.Code != 409 && w.Header().Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("retry during a slow request: %d %s", w.Code, w.Body)
		}
		retries++
		time.Sleep(50 * time.Millisecond)
	}
	first := <-done
	if first.Code != 201 {
		t.Fatalf("slow request: %d %s", first.Code, first.Body)
	}
	if c := h.calls.Load(); c != 1 || retries == 0 {
		t.Fatalf("handler ran %d times over %d retries; want once", c, retries)
	}
}

func TestCrashedAttemptIsTakenOver(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	// A gateway claimed the key and died: the claim is never completed.
	scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "crash"}
	mwCfg := idempotency.Config{Lease: 200 * time.Millisecond}
	h := &counter{}
	srv := newMW(t, store, mwCfg).Wrap(h)
	// Learn the fingerprint the middleware computes by running a request on
	// a scratch store, then plant an abandoned claim with it.
	scratch := memstore.New()
	do(newMW(t, scratch, mwCfg).Wrap(&counter{}), call{key: "crash"})
	rec, err := scratch.Get(t.Context(), scope)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := store.Claim(t.Context(), idempotency.ClaimRequest{Scope: scope, Fingerprint: rec.Fingerprint, Owner: "dead", Lease: 200 * time.Millisecond, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if w := do(srv, call{key: "crash"}); w.Code != 409 {
		t.Fatalf("retry while the dead claim's lease runs: %d, want 409", w.Code)
	}
	w := retryUntil(t, srv, "crash", func(c int) bool { return c != 409 })
	if w.Code != 201 || h.calls.Load() != 1 {
		t.Fatalf("after the lease: %d %s, calls %d", w.Code, w.Body, h.calls.Load())
	}
	if tok, _ := h.tokens.Load(int64(1)); tok.(int64) <= dead.Record.FencingToken {
		t.Fatalf("take-over ran with fencing token %v, want more than the dead claim's %d", tok, dead.Record.FencingToken)
	}
}

func TestIsolation(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	h := &counter{}
	payments := newMW(t, store, idempotency.Config{Route: "payments"}).Wrap(h)
	refunds := newMW(t, store, idempotency.Config{Route: "refunds"}).Wrap(h)
	a := do(payments, call{key: "k", tenant: "acme"})
	b := do(payments, call{key: "k", tenant: "globex"})
	c := do(refunds, call{key: "k", tenant: "acme"})
	for _, w := range []*httptest.ResponseRecorder{a, b, c} {
		if w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "" {
			t.Fatalf("same key in another tenant or route: %d replayed=%q", w.Code, w.Header().Get(idempotency.HeaderReplayed))
		}
	}
	if h.calls.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3 (one per tenant/route)", h.calls.Load())
	}
	if w := do(payments, call{key: "k", tenant: "globex"}); w.Header().Get(idempotency.HeaderReplayed) != "true" || w.Body.String() != b.Body.String() {
		t.Fatal("globex's replay is not globex's response")
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	h := &counter{}
	srv := newMW(t, memstore.New(), idempotency.Config{MaxRequestBytes: 64}).Wrap(h)
	do(srv, call{key: "used", body: `{"amount":1}`})
	tests := []struct {
		name   string
		c      call
		status int
		slug   string
	}{
		{"missing", call{}, 400, "idempotency-key-missing"},
		{"invalid", call{key: "a b"}, 400, "idempotency-key-invalid"},
		{"repeated", call{header: http.Header{"Idempotency-Key": {"a", "a"}}}, 400, "idempotency-key-invalid"},
		{"too long", call{key: strings.Repeat("x", 256)}, 400, "idempotency-key-invalid"},
		{"reused", call{key: "used", body: `{"amount":2}`}, 422, "idempotency-key-reused"},
		{"too large", call{key: "big", body: `{"pad":"` + strings.Repeat("x", 100) + `"}`}, 413, "request-too-large"},
	}
	for _, tc := range tests {
		w := do(srv, tc.c)
		if w.Code != tc.status || problemType(t, w) != tc.slug {
			t.Errorf("%s: %d %s, want %d %s", tc.name, w.Code, w.Body, tc.status, tc.slug)
		}
	}
	if h.calls.Load() != 1 {
		t.Fatalf("refused requests reached the handler: %d calls", h.calls.Load())
	}
	// Safe methods pass through without a key.
	if w := do(srv, call{method: http.MethodGet}); w.Code != 201 || h.calls.Load() != 2 {
		t.Fatalf("GET without a key: %d", w.Code)
	}
}

func TestReleasingStatusesRunAgain(t *testing.T) {
	t.Parallel()
	for _, status := range []int{408, 425, 429, 502, 503, 504} {
		h := &counter{status: status}
		srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(h)
		if w := do(srv, call{key: "k"}); w.Code != status {
			t.Fatalf("status %d passed through as %d", status, w.Code)
		}
		h.status = 201
		w := do(srv, call{key: "k"})
		if w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "" || h.calls.Load() != 2 {
			t.Fatalf("after %d the retry got %d (calls %d); want a fresh run", status, w.Code, h.calls.Load())
		}
		first, _ := h.tokens.Load(int64(1))
		if tok, _ := h.tokens.Load(int64(2)); tok.(int64) <= first.(int64) {
			t.Fatalf("the retry after %d ran with token %v, want more than the first run's %v", status, tok, first)
		}
	}
	// Any other status is stored, errors included.
	h := &counter{status: 500}
	srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(h)
	do(srv, call{key: "k"})
	if w := do(srv, call{key: "k"}); w.Code != 500 || w.Header().Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("a 500 was not stored: %d", w.Code)
	}
}

func TestAmbiguousOutcome(t *testing.T) {
	t.Parallel()
	ambiguous := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := idempotency.AttemptFrom(r.Context())
		a.Ambiguous()
		w.WriteHeader(http.StatusGatewayTimeout)
	})
	t.Run("hold", func(t *testing.T) {
		t.Parallel()
		store := memstore.New()
		srv := newMW(t, store, idempotency.Config{OnAmbiguous: idempotency.AmbiguousHold}).Wrap(ambiguous)
		if w := do(srv, call{key: "k"}); w.Code != 504 {
			t.Fatalf("first: %d", w.Code)
		}
		w := do(srv, call{key: "k"})
		if w.Code != 409 || problemType(t, w) != "idempotency-outcome-unknown" {
			t.Fatalf("retry of a held outcome: %d %s", w.Code, w.Body)
		}
		if err := store.Resolve(t.Context(), idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k"}); err != nil {
			t.Fatal(err)
		}
		if w := do(srv, call{key: "k"}); w.Code != 504 {
			t.Fatalf("after resolve the retry should run again: %d", w.Code)
		}
	})
	t.Run("release", func(t *testing.T) {
		t.Parallel()
		h := &counter{}
		var n atomic.Int32
		srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				ambiguous(w, r)
				return
			}
			h.ServeHTTP(w, r)
		}))
		do(srv, call{key: "k"})
		if w := do(srv, call{key: "k"}); w.Code != 201 {
			t.Fatalf("retry after a released ambiguous outcome: %d", w.Code)
		}
	})
	t.Run("not processed beats a stored status", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a, _ := idempotency.AttemptFrom(r.Context())
			if n.Add(1) == 1 {
				a.NotProcessed()
			}
			w.WriteHeader(http.StatusBadRequest)
		}))
		do(srv, call{key: "k"})
		do(srv, call{key: "k"})
		if n.Load() != 2 {
			t.Fatalf("a not-processed attempt was stored: %d runs", n.Load())
		}
	})
}

func TestPanicReleasesClaim(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(201)
	}))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic was swallowed")
			}
		}()
		do(srv, call{key: "k"})
	}()
	if w := do(srv, call{key: "k"}); w.Code != 201 || n.Load() != 2 {
		t.Fatalf("retry after a panic: %d, runs %d", w.Code, n.Load())
	}
}

func TestOversizedResponseNotReExecuted(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("0123456789"), 1000)
	var n atomic.Int32
	srv := newMW(t, memstore.New(), idempotency.Config{MaxStoredResponseBytes: 1024}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(200)
		for i := 0; i < len(big); i += 700 {
			_, _ = w.Write(big[i:min(i+700, len(big))])
		}
	}))
	first := do(srv, call{key: "k"})
	if first.Code != 200 || !bytes.Equal(first.Body.Bytes(), big) {
		t.Fatalf("first caller got %d and %d bytes, want 200 and %d", first.Code, first.Body.Len(), len(big))
	}
	again := do(srv, call{key: "k"})
	if again.Code != 200 || again.Header().Get(idempotency.HeaderBodyOmitted) != "true" || again.Body.Len() != 0 {
		t.Fatalf("replay of an oversized response: %d omitted=%q %d bytes", again.Code, again.Header().Get(idempotency.HeaderBodyOmitted), again.Body.Len())
	}
	if n.Load() != 1 {
		t.Fatalf("oversized response re-executed: %d runs", n.Load())
	}
}

func TestStreamingFlushes(t *testing.T) {
	t.Parallel()
	flushed := make(chan struct{})
	release := make(chan struct{})
	srv := newMW(t, memstore.New(), idempotency.Config{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "part1;")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the middleware: %v", err)
		}
		close(flushed)
		<-release
		_, _ = io.WriteString(w, "part2")
	}))
	ts := httptest.NewServer(srv)
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/payments", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "stream")
	req.Header.Set("X-Tenant", "acme")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "part1;" {
		t.Fatalf("first chunk before the handler finished: %q %v", buf, err)
	}
	<-flushed
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "part2" {
		t.Fatalf("rest = %q", rest)
	}
	w := do(srv, call{key: "stream", body: "{}"})
	if w.Body.String() != "part1;part2" || w.Header().Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("replay of a streamed response: %q", w.Body)
	}
}

func TestWaitInFlightReplays(t *testing.T) {
	t.Parallel()
	h := &counter{delay: 300 * time.Millisecond}
	srv := newMW(t, memstore.New(), idempotency.Config{WaitInFlight: 10 * time.Second}).Wrap(h)
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- do(srv, call{key: "k"}) }()
	for h.calls.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	dup := do(srv, call{key: "k"})
	orig := <-first
	if dup.Code != 201 || dup.Header().Get(idempotency.HeaderReplayed) != "true" || dup.Body.String() != orig.Body.String() {
		t.Fatalf("waiting duplicate: %d %q, want the original's replay %q", dup.Code, dup.Body, orig.Body)
	}
	if h.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", h.calls.Load())
	}
}

// failingStore fails every call, like an unreachable database.
type failingStore struct{ idempotency.Store }

var errDown = errors.New("connection refused")

func (failingStore) Claim(context.Context, idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	return idempotency.ClaimResult{}, errDown
}

func TestStoreErrorPolicy(t *testing.T) {
	t.Parallel()
	h := &counter{}
	closed := newMW(t, failingStore{}, idempotency.Config{}).Wrap(h)
	w := do(closed, call{key: "k"})
	if w.Code != 503 || problemType(t, w) != "idempotency-store-unavailable" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("fail closed: %d %s", w.Code, w.Body)
	}
	if strings.Contains(w.Body.String(), "connection refused") {
		t.Fatal("a 5xx problem leaked the internal cause")
	}
	if h.calls.Load() != 0 {
		t.Fatal("fail closed ran the handler")
	}
	var outcome idempotency.Outcome
	open := newMW(t, failingStore{}, idempotency.Config{OnStoreError: idempotency.FailOpen,
		Observe: func(_ *http.Request, e idempotency.Event) { outcome = e.Outcome }}).Wrap(h)
	if w := do(open, call{key: "k"}); w.Code != 201 || h.calls.Load() != 1 {
		t.Fatalf("fail open: %d, calls %d", w.Code, h.calls.Load())
	}
	if outcome != idempotency.OutcomeStoreError {
		t.Fatalf("fail open observed %q, want store_error", outcome)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	err := idempotency.Config{KeySyntax: "loose", OnAmbiguous: "maybe", Lease: time.Millisecond,
		Fingerprint: idempotency.FingerprintConfig{JSONFields: []string{"amount"}}}.Validate()
	testkit.WantError(t, "Validate", err, []string{"route", "key_syntax", "on_ambiguous", "lease", "json_fields"})
}

func TestOuterHeadersBelongToEachResponse(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	inner := newMW(t, memstore.New(), idempotency.Config{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "v"+strconv.Itoa(int(n.Add(1))))
		w.WriteHeader(201)
	}))
	// An outer layer sets a per-request header before the middleware runs.
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Req"))
		inner.ServeHTTP(w, r)
	})
	first := do(outer, call{key: "k", header: http.Header{"X-Req": {"one"}}})
	again := do(outer, call{key: "k", header: http.Header{"X-Req": {"two"}}})
	if first.Header().Get("X-Request-Id") != "one" || again.Header().Get("X-Request-Id") != "two" {
		t.Fatalf("request ids: first %q replay %q; each response must carry its own", first.Header().Get("X-Request-Id"), again.Header().Get("X-Request-Id"))
	}
	if again.Header().Get("X-Upstream") != "v1" || again.Header().Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("replay headers %v", again.Header())
	}
}
