package idempotency_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

func TestFingerprintTellsRequestsApart(t *testing.T) {
	t.Parallel()
	plain, _ := idempotency.NewFingerprinter(nil, nil)
	fields, _ := idempotency.NewFingerprinter(nil, []string{"/amount"})
	for _, pair := range [][2]string{
		{`{"amount":999}`, `{"amount":100,"amount":999}`},
		{`{"amount":100}`, `{"amount":100,"amount":999}`},
		{`{"o":{"amount":999}}`, `{"o":{"amount":100,"amount":999}}`},
		{"{\"note\":\"\xff\"}", "{\"note\":\"\xfe\"}"},
		{`{"note":"\ufffd"}`, "{\"note\":\"\xff\"}"},
		{`{"note":"\ufffd"}`, `{"note":"\ud800"}`},
		{`{"note":"\udc00"}`, `{"note":"\ud800"}`},
		{`{"\ufffd":1}`, "{\"\xff\":1}"},
	} {
		for _, f := range []*idempotency.Fingerprinter{plain, fields} {
			a, errA := f.Fingerprint(jsonInput(pair[0]))
			b, errB := f.Fingerprint(jsonInput(pair[1]))
			if errA == nil && errB == nil && a == b {
				t.Errorf("%q and %q share the fingerprint %s", pair[0], pair[1], a)
			}
			if errB == nil {
				t.Errorf("%q was fingerprinted; want ErrNotIJSON", pair[1])
			}
		}
	}
	// Sent as something else than JSON, the same bytes are data, fingerprinted as they are.
	for _, body := range []string{`{"amount":100,"amount":999}`, "\xff"} {
		in := jsonInput(body)
		in.ContentType = "application/octet-stream"
		if _, err := plain.Fingerprint(in); err != nil {
			t.Errorf("%q sent as application/octet-stream: %v, want a fingerprint of its bytes", body, err)
		}
	}
	// Not JSON at all: the upstream will say so; its bytes are the fingerprint.
	if _, err := plain.Fingerprint(jsonInput("{\"a\":\xff")); err != nil {
		t.Errorf("a body that is not JSON: %v, want a fingerprint of its bytes", err)
	}
}

func jsonInput(body string) idempotency.FingerprintInput {
	return idempotency.FingerprintInput{Method: "POST", Route: "payments", Path: "/v1/payments",
		ContentType: "application/json", Body: []byte(body)}
}

// TestMiddlewareRefusesNonIJSON: a JSON body with a duplicate name, bytes
// that are not UTF-8 or a lone surrogate is refused with 400 before
// anything is claimed — it neither replays the record of another request
// nor creates one of its own.
func TestMiddlewareRefusesNonIJSON(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	h := &counter{}
	srv := newMW(t, store, idempotency.Config{}).Wrap(h)
	if w := do(srv, call{key: "k1", body: `{"amount":999}`}); w.Code != http.StatusCreated {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	for _, tc := range []struct{ key, body, detail string }{
		{"k1", `{"amount":100,"amount":999}`, `duplicate member name "amount"`},
		{"k2", `{"amount":100,"amount":999}`, `duplicate member name "amount"`},
		{"k3", "{\"note\":\"\xff\"}", "/note: bytes that are not UTF-8"},
		{"k4", `{"note":"\ud800"}`, "/note: a high surrogate escape"},
	} {
		w := do(srv, call{key: tc.key, body: tc.body})
		if w.Code != http.StatusBadRequest || problemType(t, w) != "bad-request" {
			t.Errorf("%s %q: %d %s, want 400 bad-request", tc.key, tc.body, w.Code, w.Body)
			continue
		}
		var doc struct{ Detail string }
		_ = json.Unmarshal(w.Body.Bytes(), &doc)
		if w.Header().Get(idempotency.HeaderReplayed) != "" || !strings.Contains(doc.Detail, tc.detail) {
			t.Errorf("%s %q: %s, want a fresh refusal naming %q", tc.key, tc.body, w.Body, tc.detail)
		}
		if tc.key != "k1" {
			if _, err := store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "payments", Key: tc.key}); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("%s: a refused request left a record (%v)", tc.key, err)
			}
		}
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	if w := do(srv, call{key: "k1", body: `{"amount":999}`}); w.Code != http.StatusCreated || w.Header().Get(idempotency.HeaderReplayed) != "true" {
		t.Errorf("the original request again: %d replayed=%q, want its replay", w.Code, w.Header().Get(idempotency.HeaderReplayed))
	}
}
