package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestSameKeyAndBodyOnEveryAttempt(t *testing.T) {
	t.Parallel()
	type payment struct {
		Amount   int    `json:"amount_cents"`
		Currency string `json:"currency"`
	}
	tests := []struct {
		name string
		body any
		want string
	}{
		{"struct, encoded once", payment{100, "EUR"}, `{"amount_cents":100,"currency":"EUR"}`},
		{"bytes, as is", []byte(`{ "amount_cents": 100 }`), `{ "amount_cents": 100 }`},
		{"raw JSON, as is", json.RawMessage(`{"b":1,"a":2}`), `{"b":1,"a":2}`},
		{"reader, read once", io.NopCloser(strings.NewReader(`{"from":"reader"}`)), `{"from":"reader"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, reply{status: 503}, problemReply(503, "idempotency-store-unavailable", "store down", nil), created(`{"id":"pay_1"}`))
			clk := newClock()
			resp, err := testClient(g, clk).Do(t.Context(), "POST", "/v1/payments", tc.body)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.Status != 201 || resp.Attempts != 3 || string(resp.Body) != `{"id":"pay_1"}` {
				t.Fatalf("resp = %d after %d attempts, body %s; want the 201 after 3", resp.Status, resp.Attempts, resp.Body)
			}
			id, err := uuid.Parse(resp.Key)
			if err != nil || id.Version() != 7 {
				t.Fatalf("generated key %q is not a UUIDv7 (%v)", resp.Key, err)
			}
			reqs := g.requests()
			if len(reqs) != 3 {
				t.Fatalf("gateway got %d requests, want 3", len(reqs))
			}
			for i, r := range reqs {
				if r.key != resp.Key || string(r.body) != tc.want || r.header.Get("Content-Type") != "application/json" {
					t.Errorf("attempt %d: key %q body %s content type %q; want key %q body %s", i+1, r.key, r.body, r.header.Get("Content-Type"), resp.Key, tc.want)
				}
			}
			if w := clk.recorded(); len(w) != 2 || w[0] != DefaultMinBackoff || w[1] != 2*DefaultMinBackoff {
				t.Errorf("waits %v, want the doubling backoff ceilings [100ms 200ms]", w)
			}
		})
	}
}

func TestTwoCallsTwoKeys(t *testing.T) {
	t.Parallel()
	g := newGateway(t, created(`{}`))
	c := testClient(g, newClock())
	a, errA := c.Do(t.Context(), "POST", "/v1/payments", map[string]int{"n": 1})
	b, errB := c.Do(t.Context(), "POST", "/v1/payments", map[string]int{"n": 1})
	if errA != nil || errB != nil || a.Key == b.Key || a.Key == "" {
		t.Fatalf("two logical calls: keys %q and %q (%v, %v), want two distinct keys", a.Key, b.Key, errA, errB)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		first    reply
		atLeast  time.Duration
		replayed bool
	}{
		{"409 in use waits Retry-After", problemReply(409, "idempotency-key-in-use", "still running", map[string]string{"Retry-After": "1"}), time.Second, true},
		{"429 waits Retry-After", problemReply(429, "rate-limited", "slow down", map[string]string{"Retry-After": "3"}), 3 * time.Second, false},
		{"503 waits Retry-After", problemReply(503, "idempotency-store-unavailable", "", map[string]string{"Retry-After": "2"}), 2 * time.Second, false},
		{"Retry-After as an HTTP date", problemReply(429, "rate-limited", "", map[string]string{"Retry-After": "Thu, 03 Dec 2026 08:00:07 GMT"}), 7 * time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			final := created(`{"id":"pay_1"}`)
			if tc.replayed {
				final.header = map[string]string{"Content-Type": "application/json", "Idempotent-Replayed": "true"}
			}
			g := newGateway(t, tc.first, final)
			clk := newClock()
			resp, err := testClient(g, clk).Do(t.Context(), "POST", "/v1/payments", []byte(`{}`))
			if err != nil || resp.Status != 201 || resp.Attempts != 2 {
				t.Fatalf("Do: %v, resp %+v; want the 201 on attempt 2", err, resp)
			}
			if w := clk.recorded(); len(w) != 1 || w[0] < tc.atLeast {
				t.Errorf("waits %v, want one of at least %s", w, tc.atLeast)
			}
			if resp.Replayed != tc.replayed {
				t.Errorf("Replayed = %v, want %v", resp.Replayed, tc.replayed)
			}
			if reqs := g.requests(); reqs[0].key != reqs[1].key {
				t.Errorf("keys %q then %q", reqs[0].key, reqs[1].key)
			}
		})
	}
}

func TestRetriedStatuses(t *testing.T) {
	t.Parallel()
	for _, status := range []int{408, 425, 429, 502, 503, 504} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, reply{status: status, body: "not now"}, created(`{}`))
			resp, err := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/payments", nil)
			if err != nil || resp.Status != 201 || resp.Attempts != 2 {
				t.Fatalf("after a %d: %v, resp %+v; want it retried to the 201", status, err, resp)
			}
		})
	}
}

func TestFinalAnswersAreNotRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer reply
		slug   string
		is     func(error) bool
	}{
		{"422 key reused", problemReply(422, "idempotency-key-reused", "another body", nil), "idempotency-key-reused", IsKeyReused},
		{"409 outcome unknown", problemReply(409, "idempotency-outcome-unknown", "held", nil), "idempotency-outcome-unknown", IsOutcomeUnknown},
		{"400 key missing", problemReply(400, "idempotency-key-missing", "send one", nil), "idempotency-key-missing", nil},
		{"401", problemReply(401, "unauthorized", "", nil), "unauthorized", nil},
		{"413", problemReply(413, "request-too-large", "", nil), "request-too-large", nil},
		{"500 stored upstream error", problemReply(500, "internal", "", nil), "internal", nil},
		{"409 that is not in use", reply{status: 409, header: map[string]string{"Retry-After": "1"}, body: "conflict"}, "about:blank", nil},
		{"404 plain text", reply{status: 404, body: "no such thing\n"}, "about:blank", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, tc.answer, created(`{}`))
			clk := newClock()
			resp, err := testClient(g, clk).Do(t.Context(), "POST", "/v1/payments", []byte(`{}`))
			var p *ProblemError
			if !errors.As(err, &p) {
				t.Fatalf("err = %v, want a *ProblemError", err)
			}
			if resp == nil || resp.Attempts != 1 || len(g.requests()) != 1 || len(clk.recorded()) != 0 {
				t.Fatalf("resp %+v, %d requests: want the answer returned at once", resp, len(g.requests()))
			}
			if p.Slug() != tc.slug || p.Status != tc.answer.status || resp.Status != tc.answer.status {
				t.Errorf("problem %+v, want slug %q status %d", p, tc.slug, tc.answer.status)
			}
			if errors.Is(err, ErrRetriesExhausted) {
				t.Error("a final answer is not an exhausted retry")
			}
			if tc.is != nil && !tc.is(err) {
				t.Errorf("the helper for %s says false", tc.slug)
			}
			for _, is := range []func(error) bool{IsKeyReused, IsOutcomeUnknown, IsInvalidPayload} {
				if tc.is == nil && is(err) {
					t.Errorf("a helper matched %s", tc.slug)
				}
			}
		})
	}
}

// TestRetryableMember: the document's retryable member decides, whatever
// the status; a replayed answer is final even when it says true.
func TestRetryableMember(t *testing.T) {
	t.Parallel()
	doc := func(status int, retryable bool, header map[string]string) reply {
		h := map[string]string{"Content-Type": "application/problem+json"}
		for k, v := range header {
			h[k] = v
		}
		b, _ := json.Marshal(map[string]any{
			"type": "https://idemgate.dev/problems/x", "title": "x", "status": status, "detail": "d",
			"instance": "urn:uuid:01a2384e-26cb-7f2a-9944-c9c3269e0d37", "request_id": "01a2384e-26cb-7f2a-9944-c9c3269e0d37",
			"retryable": retryable,
		})
		return reply{status: status, header: h, body: string(b)}
	}
	tests := []struct {
		name     string
		answer   reply
		attempts int
	}{
		{"true on a 500", doc(500, true, nil), 2},
		{"false on a 503", doc(503, false, nil), 1},
		{"true on a replay", doc(500, true, map[string]string{"Idempotent-Replayed": "true"}), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, tc.answer, created(`{}`))
			resp, _ := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/payments", []byte(`{}`))
			if resp == nil || resp.Attempts != tc.attempts {
				t.Fatalf("resp %+v, want %d attempts", resp, tc.attempts)
			}
		})
	}
}

// TestProblemMembers: what a generic client acts on is decoded, and a
// document without retryable gets it from its status.
func TestProblemMembers(t *testing.T) {
	t.Parallel()
	body := `{"type":"https://idemgate.dev/problems/idempotency-key-reused","title":"Idempotency-Key reused with a different request",
		"status":422,"detail":"use a new key","instance":"urn:uuid:01a2384e-26cb-7f2a-9944-c9c3269e0d37",
		"request_id":"01a2384e-26cb-7f2a-9944-c9c3269e0d37","retryable":false,"idempotency_key":"order-42",
		"documentation":"https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header#section-2.2"}`
	g := newGateway(t, reply{status: 422, header: map[string]string{"Content-Type": "application/problem+json"}, body: body})
	_, err := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/payments", []byte(`{}`), WithKey("order-42"))
	var p *ProblemError
	if !errors.As(err, &p) || !IsKeyReused(err) {
		t.Fatalf("err = %v, want idempotency-key-reused", err)
	}
	if p.Retryable || p.IdempotencyKey != "order-42" || p.Instance != "urn:uuid:01a2384e-26cb-7f2a-9944-c9c3269e0d37" ||
		p.Documentation != "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header#section-2.2" {
		t.Errorf("problem %+v", p)
	}
	for _, tc := range []struct {
		answer    reply
		retryable bool
	}{
		{problemReply(409, "idempotency-key-in-use", "", nil), true},
		{problemReply(409, "idempotency-outcome-unknown", "", nil), false},
		{problemReply(429, "rate-limited", "", nil), true},
		{reply{status: 502, body: "bad gateway"}, true},
		{reply{status: 500, body: "oops"}, false},
	} {
		p := problemFrom(tc.answer.status, http.Header{"Content-Type": {tc.answer.header["Content-Type"]}}, []byte(tc.answer.body))
		if p.Retryable != tc.retryable {
			t.Errorf("%d %s without retryable: Retryable %v, want %v", p.Status, p.Slug(), p.Retryable, tc.retryable)
		}
	}
}

func TestNonProblemAnswer(t *testing.T) {
	t.Parallel()
	g := newGateway(t, reply{status: 404, header: map[string]string{"Content-Type": "text/plain"}, body: "no such thing\n"})
	_, err := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/nowhere", nil)
	var p *ProblemError
	if !errors.As(err, &p) || p.Type != "about:blank" || p.Title != "Not Found" || p.Detail != "no such thing" {
		t.Fatalf("err = %#v, want a ProblemError built from the status", err)
	}
	if got := err.Error(); got != "idemgate: 404 Not Found: no such thing" {
		t.Errorf("Error() = %q", got)
	}
}

func TestInvalidPayloadDecodesErrors(t *testing.T) {
	t.Parallel()
	body := `{"type":"https://idemgate.dev/problems/invalid-payload","title":"Invalid payload","status":422,
		"detail":"the payload does not match the job's schema","instance":"/v1/shipments","request_id":"req-9",
		"errors":[{"field":"quantity","message":"must be >= 1"},{"field":"parcels[2].weight_g","message":"required"}]}`
	g := newGateway(t, reply{status: 422, header: map[string]string{"Content-Type": "application/problem+json; charset=utf-8"}, body: body})
	_, err := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/shipments", map[string]int{"quantity": 0})
	var p *ProblemError
	if !IsInvalidPayload(err) || !errors.As(err, &p) {
		t.Fatalf("err = %v, want invalid-payload", err)
	}
	want := []FieldError{{Field: "quantity", Message: "must be >= 1"}, {Field: "parcels[2].weight_g", Message: "required"}}
	if len(p.Errors) != 2 || p.Errors[0] != want[0] || p.Errors[1] != want[1] {
		t.Errorf("Errors = %+v, want %+v", p.Errors, want)
	}
	if p.RequestID != "req-9" || p.Instance != "/v1/shipments" || p.Title != "Invalid payload" {
		t.Errorf("problem %+v", p)
	}
	if got := err.Error(); got != "idemgate: 422 invalid-payload: the payload does not match the job's schema" {
		t.Errorf("Error() = %q", got)
	}
}

func TestContextCancelStopsRetrying(t *testing.T) {
	t.Parallel()
	t.Run("during a backoff", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, reply{status: 503})
		clk := newClock()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		clk.onSleep = func(n int) {
			if n == 2 {
				cancel()
			}
		}
		resp, err := testClient(g, clk).Do(ctx, "POST", "/v1/payments", nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		var p *ProblemError
		if !errors.As(err, &p) || p.Status != 503 {
			t.Errorf("err = %v, want the last answer wrapped too", err)
		}
		if resp.Attempts != 2 || len(g.requests()) != 2 {
			t.Errorf("%d attempts, %d requests after the cancel in the second wait; want 2", resp.Attempts, len(g.requests()))
		}
	})
	t.Run("during a real Retry-After", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, problemReply(429, "rate-limited", "", map[string]string{"Retry-After": "50"}))
		c := New(g.srv.URL, WithHTTPClient(g.srv.Client()))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		type result struct {
			resp *Response
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := c.Do(ctx, "POST", "/v1/payments", nil)
			done <- result{resp, err}
		}()
		for len(g.requests()) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Error("Do kept waiting out a 50s Retry-After after its context was cancelled")
			r = <-done
		}
		if !errors.Is(r.err, context.Canceled) || r.resp.Attempts != 1 {
			t.Fatalf("after cancel: %v, %d attempts", r.err, r.resp.Attempts)
		}
	})
	t.Run("already cancelled", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, created(`{}`))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		resp, err := testClient(g, newClock()).Do(ctx, "POST", "/v1/payments", nil)
		if !errors.Is(err, context.Canceled) || resp.Attempts != 0 || len(g.requests()) != 0 {
			t.Fatalf("%v, resp %+v, %d requests; want nothing sent", err, resp, len(g.requests()))
		}
	})
}

func TestMaxElapsed(t *testing.T) {
	t.Parallel()
	t.Run("backoff", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, problemReply(503, "idempotency-store-unavailable", "", nil))
		clk := newClock()
		r := Retry{MaxAttempts: 1000, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxElapsed: 5 * time.Second}
		resp, err := testClient(g, clk, WithRetry(r)).Do(t.Context(), "POST", "/v1/payments", nil)
		if !errors.Is(err, ErrRetriesExhausted) {
			t.Fatalf("err = %v, want ErrRetriesExhausted", err)
		}
		var p *ProblemError
		if !errors.As(err, &p) || p.Status != 503 || resp.Status != 503 {
			t.Errorf("err = %v, resp %d: want the last answer", err, resp.Status)
		}
		w := clk.recorded()
		if s := sum(w); s > r.MaxElapsed || s+r.MaxBackoff <= r.MaxElapsed {
			t.Errorf("waits %v sum to %s; want within %s, and the retrying to go on until the next wait would pass it", w, s, r.MaxElapsed)
		}
		if resp.Attempts != len(w)+1 || len(g.requests()) != resp.Attempts {
			t.Errorf("%d attempts, %d waits, %d requests", resp.Attempts, len(w), len(g.requests()))
		}
	})
	t.Run("Retry-After longer than what is left", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, problemReply(503, "idempotency-store-unavailable", "", map[string]string{"Retry-After": "120"}), created(`{}`))
		clk := newClock()
		resp, err := testClient(g, clk).Do(t.Context(), "POST", "/v1/payments", nil)
		var p *ProblemError
		if !errors.Is(err, ErrRetriesExhausted) || !errors.As(err, &p) || p.Status != 503 {
			t.Fatalf("err = %v, want exhausted with the 503", err)
		}
		if resp.Attempts != 1 || len(clk.recorded()) != 0 {
			t.Errorf("%d attempts, waits %v; want the 503 returned without waiting", resp.Attempts, clk.recorded())
		}
	})
}

func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	g := newGateway(t, reply{hangUp: true})
	clk := newClock()
	resp, err := testClient(g, clk, WithRetry(Retry{MaxAttempts: 3})).Do(t.Context(), "POST", "/v1/payments", nil)
	if !errors.Is(err, ErrRetriesExhausted) || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v, want exhausted after 3 attempts", err)
	}
	var p *ProblemError
	if errors.As(err, &p) {
		t.Errorf("no answer came, yet err holds a ProblemError: %v", p)
	}
	if resp.Status != 0 || resp.Key == "" || resp.Attempts != 3 || len(g.requests()) != 3 {
		t.Errorf("resp %+v, %d requests; want status 0, the key, 3 attempts", resp, len(g.requests()))
	}
}

func TestNetworkErrorIsRetried(t *testing.T) {
	t.Parallel()
	g := newGateway(t, reply{hangUp: true}, created(`{"id":"pay_1"}`))
	resp, err := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/payments", []byte(`{"a":1}`))
	if err != nil || resp.Status != 201 || resp.Attempts != 2 {
		t.Fatalf("Do: %v, resp %+v; want the 201 on attempt 2", err, resp)
	}
	reqs := g.requests()
	if len(reqs) != 2 || reqs[0].key != resp.Key || reqs[1].key != resp.Key || !bytes.Equal(reqs[0].body, reqs[1].body) {
		t.Errorf("requests %+v; want the same key and body twice", reqs)
	}
}

func TestWithKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, header string }{
		{"order-42-charge", "order-42-charge"},
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{`C:\path`, `C:\path`},
		{"has space", `"has space"`},
		{`a,"b"\c`, `"a,\"b\"\\c"`},
	}
	for _, tc := range tests {
		g := newGateway(t, reply{status: 503}, created(`{}`))
		resp, err := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/payments", nil, WithKey(tc.key))
		if err != nil || resp.Key != tc.key {
			t.Fatalf("WithKey(%q): %v, Key %q", tc.key, err, resp.Key)
		}
		for _, r := range g.requests() {
			if r.key != tc.header {
				t.Errorf("WithKey(%q): header %q, want %q", tc.key, r.key, tc.header)
			}
		}
	}
	g := newGateway(t, created(`{}`))
	resp, err := testClient(g, newClock()).Do(t.Context(), "POST", "/v1/payments", nil, WithKey("é"))
	if !errors.Is(err, ErrInvalidKey) || resp != nil || len(g.requests()) != 0 {
		t.Errorf("a key outside printable ASCII: %v, resp %v, %d requests; want ErrInvalidKey and nothing sent", err, resp, len(g.requests()))
	}
}

func TestSafeMethods(t *testing.T) {
	t.Parallel()
	g := newGateway(t, reply{status: 503}, reply{status: 200, body: `{"status":"queued"}`})
	c := testClient(g, newClock())
	resp, err := c.Do(t.Context(), "GET", "/v1/jobs/job_1", nil)
	if err != nil || resp.Status != 200 || resp.Attempts != 2 || resp.Key != "" {
		t.Fatalf("GET: %v, resp %+v; want 200 on attempt 2 without a key", err, resp)
	}
	if _, err := c.Do(t.Context(), "HEAD", "/v1/jobs/job_1", nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range g.requests() {
		if _, ok := r.header["Idempotency-Key"]; ok || r.header.Get("Content-Type") != "" {
			t.Errorf("%s carried Idempotency-Key %q or a Content-Type without a body", r.method, r.key)
		}
	}
	if _, err := c.Do(t.Context(), "GET", "/v1/jobs/job_1", nil, WithKey("asked-for")); err != nil {
		t.Fatal(err)
	}
	if reqs := g.requests(); reqs[len(reqs)-1].key != "asked-for" {
		t.Errorf("a key given with WithKey on GET was not sent")
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	g := newGateway(t, created(`{}`))
	c := testClient(g, newClock(), WithAPIKey("acme-key"))
	if _, err := c.Do(t.Context(), "POST", "v1/notes?draft=1", "plain text", WithHeader("Content-Type", "text/plain"), WithHeader("Idempotency-Key", "ignored"), WithKey("k-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(t.Context(), "PATCH", "/v1/notes/1", nil, WithHeader("Authorization", "Bearer other")); err != nil {
		t.Fatal(err)
	}
	reqs := g.requests()
	if h := reqs[0].header; h.Get("Authorization") != "Bearer acme-key" || h.Get("Content-Type") != "text/plain" || reqs[0].key != "k-1" || reqs[0].path != "/v1/notes?draft=1" {
		t.Errorf("first call: path %q headers %v", reqs[0].path, h)
	}
	if string(reqs[0].body) != `"plain text"` {
		t.Errorf("a string body is JSON-encoded: got %s", reqs[0].body)
	}
	if h := reqs[1].header; h.Get("Authorization") != "Bearer other" || reqs[1].key == "" || len(reqs[1].body) != 0 {
		t.Errorf("second call: %v body %q; want the per-call Authorization, a key, no body", h, reqs[1].body)
	}
}

func TestCallThatCannotBeBuilt(t *testing.T) {
	t.Parallel()
	c := New("ftp://example.com")
	if resp, err := c.Do(t.Context(), "POST", "/x", nil); err == nil || resp != nil {
		t.Errorf("ftp base URL: %v, %v; want an error before sending", resp, err)
	}
	g := newGateway(t, created(`{}`))
	if resp, err := testClient(g, newClock()).Do(t.Context(), "POST", "/x", func() {}); err == nil || resp != nil || len(g.requests()) != 0 {
		t.Errorf("a body that does not encode: %v, %v", resp, err)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	c := New("http://gateway", WithRetry(Retry{MinBackoff: time.Second, MaxBackoff: 8 * time.Second}))
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 8 * time.Second, 1000: 8 * time.Second} {
		if got := c.ceiling(n); got != want {
			t.Errorf("ceiling(%d) = %s, want %s", n, got, want)
		}
	}
	huge := New("http://gateway", WithRetry(Retry{MinBackoff: time.Duration(1) << 61, MaxBackoff: time.Duration(1<<63 - 1)}))
	if got := huge.ceiling(10); got <= 0 {
		t.Errorf("ceiling overflowed to %s", got)
	}
	if got := huge.backoff(10); got < 0 {
		t.Errorf("backoff overflowed to %s", got)
	}
	for range 100 {
		if d := c.backoff(3); d < 0 || d > 4*time.Second {
			t.Fatalf("backoff(3) = %s, want within [0, 4s]", d)
		}
	}
}

func TestRetryDefaults(t *testing.T) {
	t.Parallel()
	got := Retry{MaxAttempts: -1, MinBackoff: time.Second, MaxBackoff: time.Millisecond}.withDefaults()
	want := Retry{MaxAttempts: 8, MinBackoff: time.Second, MaxBackoff: time.Second, MaxElapsed: time.Minute}
	if got != want {
		t.Errorf("withDefaults = %+v, want %+v", got, want)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		" 0 ":                           0,
		"-1":                            0,
		"1.5":                           0,
		"soon":                          0,
		"99999999999999999":             24 * time.Hour,
		"Thu, 03 Dec 2026 08:00:30 GMT": 30 * time.Second,
		"Thu, 03 Dec 2026 07:00:00 GMT": 0,
	}
	for v, want := range tests {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
