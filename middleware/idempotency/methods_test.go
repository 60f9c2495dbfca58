package idempotency_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// TestMethodsThatNeedAKey: methods are case-sensitive (RFC 9110), so a
// lower-case "post" is not POST; it, and any other method that is not a
// standard one, needs a key unless the route says no method does.
func TestMethodsThatNeedAKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		methods []string
		needKey []string
		noKey   []string
	}{
		{"default", nil,
			[]string{"POST", "PATCH", "post", "patch", "Post", "PURGE", "PROPPATCH"},
			[]string{"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}},
		{"PUT only", []string{"put"},
			[]string{"PUT", "put", "post", "FOO"},
			[]string{"POST", "PATCH", "GET", "DELETE"}},
		{"none", []string{},
			nil,
			[]string{"POST", "post", "FOO"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &counter{}
			mw := newMW(t, memstore.New(), idempotency.Config{Methods: tc.methods})
			for _, m := range tc.needKey {
				if w := do(mw.Wrap(h), call{method: m}); w.Code != http.StatusBadRequest || problemType(t, w) != "idempotency-key-missing" {
					t.Errorf("%s without a key: %d, want 400 idempotency-key-missing", m, w.Code)
				}
			}
			if n := h.calls.Load(); n != 0 {
				t.Fatalf("%d requests ran without a key", n)
			}
			for _, m := range tc.noKey {
				if w := do(mw.Wrap(h), call{method: m}); w.Code != http.StatusCreated {
					t.Errorf("%s without a key: %d, want it to pass", m, w.Code)
				}
			}
		})
	}
}

// TestForwardKeyPolicy: what an upstream receives for a key.
func TestForwardKeyPolicy(t *testing.T) {
	t.Parallel()
	s := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "order-42"}
	for policy, want := range map[idempotency.ForwardKeyPolicy]string{
		"": "acme:order-42", idempotency.ForwardTenantScoped: "acme:order-42", idempotency.ForwardAsSent: "order-42",
	} {
		if got := policy.Key(s); got != want {
			t.Errorf("%q.Key = %q, want %q", policy, got, want)
		}
	}
	err := idempotency.Config{Route: "r", ForwardKey: "raw"}.Validate()
	var fe *idempotency.FieldError
	if !errors.As(err, &fe) || fe.Field != "forward_key" {
		t.Errorf("forward_key raw: %v, want a forward_key FieldError", err)
	}
}
