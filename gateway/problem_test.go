package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

const draft = "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header"

// TestProblemTable pins, for every row of the error contract, what a
// generic client acts on: the status, retryable, the draft section in
// documentation and in Link, and the key the problem concerns.
func TestProblemTable(t *testing.T) {
	t.Parallel()
	pw := NewProblemWriter(problem.DefaultBase, slog.New(slog.DiscardHandler))
	refused := func(sentinel error) error {
		return &problem.Error{Err: sentinel, Detail: "refused", Key: "order-42"}
	}
	tests := []struct {
		slug      string
		err       error
		status    int
		retryable bool
		section   string // "" for no documentation
		key       string // the idempotency_key member, "" for none
	}{
		{"idempotency-key-missing", idempotency.ErrKeyMissing, 400, false, "#section-2.1", ""},
		{"idempotency-key-invalid", &problem.Error{Err: idempotency.ErrKeyInvalid, Detail: "a list"}, 400, false, "#section-2.1", ""},
		{"bad-request", &problem.Error{Err: ErrBadRequest, Detail: "not JSON"}, 400, false, "", ""},
		{"unauthorized", auth.ErrUnauthorized, 401, false, "", ""},
		{"forbidden", &problem.Error{Err: ErrForbidden, Detail: "another origin"}, 403, false, "", ""},
		{"not-found", &problem.Error{Err: ErrNotFound, Detail: "no such job"}, 404, false, "", ""},
		{"idempotency-key-in-use", refused(idempotency.ErrKeyInUse), 409, true, "#section-2.6", "order-42"},
		{"idempotency-outcome-unknown", refused(idempotency.ErrOutcomeUnknown), 409, false, "#section-2.6", "order-42"},
		{"request-too-large", refused(idempotency.ErrRequestTooLarge), 413, false, "", "order-42"},
		{"unsupported-content-encoding", refused(idempotency.ErrEncodingRefused), 415, false, "", "order-42"},
		{"idempotency-key-reused", refused(idempotency.ErrKeyReused), 422, false, "#section-2.2", "order-42"},
		{"invalid-payload", &problem.Error{Err: ErrInvalidPayload, Detail: "amount_cents"}, 422, false, "", ""},
		{"rate-limited", &problem.Error{Err: ratelimit.ErrLimited, RetryAfter: time.Second}, 429, true, "", ""},
		{"internal", errors.New("boom"), 500, false, "", ""},
		{"upstream-unavailable", &problem.Error{Err: ErrUpstreamUnavailable, Detail: "refused"}, 502, true, "", ""},
		{"idempotency-store-unavailable", refused(idempotency.ErrStoreUnavailable), 503, true, "", "order-42"},
		{"queue-unavailable", &problem.Error{Err: ErrQueueUnavailable, Detail: "down"}, 503, true, "", ""},
		{"not-ready", &problem.Error{Err: ErrNotReady, Detail: "unreachable: redis"}, 503, true, "", ""},
		{"upstream-timeout", &problem.Error{Err: ErrUpstreamTimeout, Detail: "slow"}, 504, true, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.slug, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			requestid.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				pw.Write(w, r, tc.err)
			})).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/payments", nil))
			p := decodeProblem(t, w)
			if p.Type != problem.DefaultBase+tc.slug || p.Status != tc.status || w.Code != tc.status {
				t.Fatalf("%d %s (status member %d), want %d %s", w.Code, p.Type, p.Status, tc.status, tc.slug)
			}
			if p.Retryable != tc.retryable {
				t.Errorf("retryable %v, want %v", p.Retryable, tc.retryable)
			}
			wantDoc, wantLink := "", ""
			if tc.section != "" {
				wantDoc = draft + tc.section
				wantLink = "<" + wantDoc + `>; rel="describedby"; type="text/html"`
			}
			if got := deref(p.Documentation); got != wantDoc {
				t.Errorf("documentation %q, want %q", got, wantDoc)
			}
			if got := w.Header().Get("Link"); got != wantLink {
				t.Errorf("Link %q, want %q", got, wantLink)
			}
			if got := deref(p.IdempotencyKey); got != tc.key {
				t.Errorf("idempotency_key %q, want %q", got, tc.key)
			}
			id := w.Header().Get(requestid.Header)
			if p.RequestId != id || p.Instance != "urn:uuid:"+id {
				t.Errorf("request_id %q, instance %q; want the X-Request-Id %q and its urn:uuid:", p.RequestId, p.Instance, id)
			}
		})
	}
}

// TestProblemNamesTheKeyOfItsClaim: an error of a request running under
// its claim (the upstream timed out) names the key the client sent.
func TestProblemNamesTheKeyOfItsClaim(t *testing.T) {
	t.Parallel()
	pw := NewProblemWriter(problem.DefaultBase, slog.New(slog.DiscardHandler))
	mw, err := idempotency.New(memstore.New(), idempotency.Config{Route: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mw.Drain(context.Background()) })
	h := requestid.Middleware(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw.Write(w, r, &problem.Error{Err: ErrUpstreamTimeout, Detail: "slow"})
	})))
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{}`))
	r.Header.Set("Idempotency-Key", `"order-42"`)
	r.Header.Set(requestid.Header, "client-chosen")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	p := decodeProblem(t, w)
	if w.Code != http.StatusGatewayTimeout || !p.Retryable || deref(p.IdempotencyKey) != "order-42" {
		t.Fatalf("%d retryable=%v idempotency_key=%q; want 504, true, order-42", w.Code, p.Retryable, deref(p.IdempotencyKey))
	}
	if p.RequestId != "client-chosen" || p.Instance != requestid.URN("client-chosen") || !strings.HasPrefix(p.Instance, "urn:uuid:") {
		t.Fatalf("request_id %q, instance %q; want the client's id and its name-based urn:uuid:", p.RequestId, p.Instance)
	}
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) openapi.Problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var p openapi.Problem
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem: %v", err)
	}
	return p
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
