package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	v := testVerifier(t)
	var calls atomic.Int64
	h := Handler(v, pool, func(d Delivery) string {
		var p struct {
			OrderID string `json:"order_id"`
		}
		_ = json.Unmarshal(d.Data, &p)
		return "order:" + p.OrderID
	}, func(ctx context.Context, tx pgx.Tx, d Delivery) (string, error) {
		switch {
		case strings.HasPrefix(d.BusinessKey, "reject:"):
			return "", Reject(errors.New("order o-1 is cancelled"))
		case strings.HasPrefix(d.BusinessKey, "fail:"):
			return "", errors.New("dial tcp 10.0.0.7:5432: secret internals")
		}
		return effect(d, &calls)(ctx, tx)
	})

	type answer struct {
		status int
		header http.Header
		body   map[string]string
	}
	serve := func(r *http.Request) answer {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r.WithContext(t.Context()))
		var body map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("answer %d is not a JSON object: %q", rec.Code, rec.Body)
		}
		return answer{rec.Code, rec.Header(), body}
	}

	first := serve(request(t, testSecret, newWire("acme", "shipment:o-1", 5)))
	if first.status != http.StatusOK || first.body["result_ref"] == "" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first delivery: %d %v %v, want 200 with a result_ref", first.status, first.header, first.body)
	}

	for _, tc := range []struct {
		name       string
		req        func() *http.Request
		status     int
		header     string // a header that must be "true"
		body       string // the body's result_ref or the start of its error
		wantEffect bool
	}{
		{name: "repeat answers the first result", status: http.StatusOK, header: "Idempotent-Replayed",
			req: func() *http.Request { return request(t, testSecret, newWire("acme", "shipment:o-1", 5)) }, body: first.body["result_ref"]},
		{name: "bad signature", status: http.StatusUnauthorized, body: "receiver: no matching webhook signature",
			req: func() *http.Request { return request(t, otherSecret, newWire("acme", "shipment:o-2", 5)) }},
		{name: "no signature", status: http.StatusUnauthorized, body: "receiver: missing webhook headers",
			req: func() *http.Request {
				r := request(t, testSecret, newWire("acme", "shipment:o-2", 5))
				r.Header.Del("webhook-signature")
				return r
			}},
		{name: "header mismatch", status: http.StatusBadRequest, body: "receiver: bad delivery envelope: Idempotency-Key",
			req: func() *http.Request {
				r := request(t, testSecret, newWire("acme", "shipment:o-2", 5))
				r.Header.Set("Idempotency-Key", "shipment:o-3")
				return r
			}},
		{name: "stale token", status: http.StatusConflict, header: "Idemgate-Stale", body: "receiver: stale fencing token 4",
			req: func() *http.Request { return request(t, testSecret, newWire("acme", "shipment:o-2", 4)) }},
		{name: "rejected", status: http.StatusUnprocessableEntity, body: "order o-1 is cancelled",
			req: func() *http.Request { return request(t, testSecret, newWire("acme", "reject:o-1", 5)) }},
		{name: "failed", status: http.StatusInternalServerError, body: "internal error",
			req: func() *http.Request { return request(t, testSecret, newWire("acme", "fail:o-1", 5)) }},
		{name: "another tenant, same key", status: http.StatusOK, wantEffect: true,
			req: func() *http.Request { return request(t, testSecret, newWire("globex", "shipment:o-1", 1)) }},
		{name: "GET", status: http.StatusMethodNotAllowed, body: "method not allowed",
			req: func() *http.Request { return httptest.NewRequest(http.MethodGet, "/hooks/shipments", nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			got := serve(tc.req())
			if got.status != tc.status {
				t.Fatalf("status %d %v, want %d", got.status, got.body, tc.status)
			}
			if tc.header != "" && got.header.Get(tc.header) != "true" {
				t.Fatalf("header %s = %q, want true", tc.header, got.header.Get(tc.header))
			}
			msg := got.body["result_ref"]
			if tc.status != http.StatusOK {
				msg = got.body["error"]
			}
			if !strings.HasPrefix(msg, tc.body) {
				t.Fatalf("body %v, want it to start with %q", got.body, tc.body)
			}
			if strings.Contains(msg, "secret internals") {
				t.Fatalf("body leaks the cause: %v", got.body)
			}
			if applied := calls.Load() != before; applied != tc.wantEffect {
				t.Fatalf("effect applied = %v, want %v", applied, tc.wantEffect)
			}
		})
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != 2 {
		t.Fatalf("%d effects in all, want 2 (acme and globex)", n)
	}
}

// An unexpected error is logged with its cause, which the answer leaves out.
// Not parallel: it swaps slog's default logger.
func TestHandlerLogsCause(t *testing.T) {
	var logged strings.Builder
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	h := Handler(testVerifier(t), failingDB{}, nil, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request(t, testSecret, newWire("acme", "k", 1)))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusInternalServerError || strings.Contains(string(body), "connection refused") {
		t.Fatalf("answer %d %s, want 500 without the cause", rec.Code, body)
	}
	if !strings.Contains(logged.String(), "connection refused") || !strings.Contains(logged.String(), "tenant=acme") {
		t.Fatalf("log %q does not name the cause and the tenant", logged.String())
	}
}

type failingDB struct{}

func (failingDB) Begin(context.Context) (pgx.Tx, error) {
	return nil, fmt.Errorf("dial: connection refused")
}
