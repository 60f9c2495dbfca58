package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// A header listed in HeadersIfPresent counts only when a request carries
// it: a record stored before it was listed still replays to the same
// request, and the same key with the header, or with another value, is
// another request.
func TestHeadersIfPresent(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	var runs atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusAccepted)
	})
	newMW := func(ifPresent ...string) http.Handler {
		mw, err := idempotency.New(store, idempotency.Config{Route: "jobs", Tenant: func(*http.Request) string { return "acme" },
			Fingerprint: idempotency.FingerprintConfig{HeadersIfPresent: ifPresent}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mw.Drain(t.Context()) })
		return mw.Wrap(handler)
	}
	post := func(h http.Handler, key string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/jobs", strings.NewReader(`{"a":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Add(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	before, after := newMW(), newMW("idemgate-delay")
	if w := post(before, "old"); w.Code != http.StatusAccepted {
		t.Fatalf("stored before the header was listed: %d", w.Code)
	}
	if w := post(after, "old"); w.Code != http.StatusAccepted || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("the same request after the header was listed: %d replayed=%q, want the stored answer", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if w := post(after, "old", "Idemgate-Delay", "5"); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("the same key with the header: %d, want 422", w.Code)
	}
	if w := post(after, "new", "Idemgate-Delay", "5"); w.Code != http.StatusAccepted {
		t.Fatalf("a new key with the header: %d", w.Code)
	}
	if w := post(after, "new", "Idemgate-Delay", " 5 "); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("its retry: %d, want the stored answer", w.Code)
	}
	for _, other := range [][]string{{"Idemgate-Delay", "6"}, nil, {"Idemgate-Delay", "5", "Idemgate-Delay", "5"}} {
		if w := post(after, "new", other...); w.Code != http.StatusUnprocessableEntity {
			t.Errorf("the same key with %q: %d, want 422", other, w.Code)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
	if _, err := idempotency.New(store, idempotency.Config{Route: "jobs",
		Fingerprint: idempotency.FingerprintConfig{HeadersIfPresent: []string{"bad header"}}}); err == nil {
		t.Error("a header name with a space was accepted")
	}
}
