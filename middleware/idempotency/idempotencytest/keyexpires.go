package idempotencytest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// testKeyExpires: every answer the middleware gives under a key that has
// a record says until when the record is kept (Idempotency-Key-Expires),
// and says the record's own time: the first answer that stored it (the
// retention after now, or after a RetainAfter time), a replay, the 422 of
// the key reused with another body, and the 409 of a retry while the
// original is in flight (that record's expiry as it stands, which the
// completion moves on). An answer that released the key says nothing.
func testKeyExpires(t *testing.T, s idempotency.Store) {
	const ahead = 720 * time.Hour
	mw, err := idempotency.New(s, idempotency.Config{Route: "route", Retention: retention, Lease: lease,
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mw.Drain(t.Context()) })
	entered, hold := make(chan struct{}), make(chan struct{})
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Answer") {
		case "retain":
			a, _ := idempotency.AttemptFrom(r.Context())
			a.RetainAfter(time.Now().Add(ahead))
			w.WriteHeader(http.StatusAccepted)
		case "release":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "hold":
			close(entered)
			<-hold
			w.WriteHeader(http.StatusCreated)
		default:
			// A handler's own copy never reaches the client.
			w.Header().Set(idempotency.HeaderKeyExpires, "Thu, 01 Jan 1970 00:00:00 GMT")
			w.WriteHeader(http.StatusCreated)
		}
	}))
	send := func(scope idempotency.Scope, answer, body string) *http.Response {
		r := httptest.NewRequest(http.MethodPost, "/things", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", scope.Key)
		r.Header.Set("X-Tenant", scope.Tenant)
		r.Header.Set("X-Answer", answer)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result()
	}
	expires := func(resp *http.Response) time.Time {
		t.Helper()
		v := resp.Header.Get(idempotency.HeaderKeyExpires)
		at, err := http.ParseTime(v)
		if err != nil || !strings.HasSuffix(v, " GMT") {
			t.Fatalf("%d answer: %s %q is not an HTTP-date", resp.StatusCode, idempotency.HeaderKeyExpires, v)
		}
		return at
	}
	record := func(scope idempotency.Scope) idempotency.Record {
		scope.Route = "route"
		return mustGet(t, s, scope)
	}
	stamp := func(at time.Time) string { return at.UTC().Format(http.TimeFormat) }

	for _, tc := range []struct {
		name, answer string
		keep         time.Duration
	}{
		{"a first answer", "", retention},
		{"a first answer retained after a time ahead", "retain", ahead + retention},
	} {
		scope := newScope()
		before := time.Now()
		first := send(scope, tc.answer, `{"n":1}`)
		rec := record(scope)
		got := expires(first)
		// The first answer's time is counted from before the store's own
		// commit, to the second: never after the record's, and within a
		// minute of it (a skewed clock, a slow store).
		if got.After(rec.ExpiresAt) || got.Before(rec.ExpiresAt.Add(-time.Minute)) || got.Before(before.Add(tc.keep-time.Minute)) {
			t.Errorf("%s: %s %s, record expires %s (kept %s)", tc.name, idempotency.HeaderKeyExpires, got, rec.ExpiresAt, tc.keep)
		}
		replay := send(scope, tc.answer, `{"n":1}`)
		if replay.Header.Get(idempotency.HeaderReplayed) != "true" || replay.Header.Get(idempotency.HeaderKeyExpires) != stamp(rec.ExpiresAt) {
			t.Errorf("%s: the replay says %q, want the record's %q", tc.name, replay.Header.Get(idempotency.HeaderKeyExpires), stamp(rec.ExpiresAt))
		}
		reused := send(scope, tc.answer, `{"n":2}`)
		if reused.StatusCode != http.StatusUnprocessableEntity || reused.Header.Get(idempotency.HeaderKeyExpires) != stamp(rec.ExpiresAt) {
			t.Errorf("%s: the key reused: %d saying %q, want 422 saying %q", tc.name, reused.StatusCode, reused.Header.Get(idempotency.HeaderKeyExpires), stamp(rec.ExpiresAt))
		}
	}

	released := newScope()
	if resp := send(released, "release", `{}`); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(idempotency.HeaderKeyExpires) != "" {
		t.Errorf("a released key: %d saying %q, want 503 saying nothing", resp.StatusCode, resp.Header.Get(idempotency.HeaderKeyExpires))
	}

	inFlight := newScope()
	done := make(chan *http.Response, 1)
	go func() { done <- send(inFlight, "hold", `{}`) }()
	select {
	case <-entered:
	case <-time.After(waitFor):
		close(hold)
		t.Fatal("the held request never reached its handler")
	}
	rec := record(inFlight)
	busy := send(inFlight, "hold", `{}`)
	close(hold)
	first := <-done
	if busy.StatusCode != http.StatusConflict || busy.Header.Get(idempotency.HeaderKeyExpires) != stamp(rec.ExpiresAt) {
		t.Errorf("a retry in flight: %d saying %q, want 409 saying the in-flight record's %q", busy.StatusCode, busy.Header.Get(idempotency.HeaderKeyExpires), stamp(rec.ExpiresAt))
	}
	if done := record(inFlight); first.StatusCode != http.StatusCreated || expires(first).After(done.ExpiresAt) {
		t.Errorf("the held request: %d saying %s, its record expires %s", first.StatusCode, expires(first), done.ExpiresAt)
	}
}
