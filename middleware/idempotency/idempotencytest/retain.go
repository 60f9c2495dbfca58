package idempotencytest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// testRetainAfter: a handler that asks, through the middleware, for its
// response to be kept until a time weeks ahead (a job scheduled a month
// out) gets a record that expires the retention after that time, not the
// retention after now; one that asks nothing keeps the retention. A store
// that capped the retention would let a retry within the schedule run
// again as a new request.
func testRetainAfter(t *testing.T, s idempotency.Store) {
	const ahead = 720 * time.Hour
	mw, err := idempotency.New(s, idempotency.Config{Route: "route", Retention: retention,
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mw.Drain(t.Context()) })
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := idempotency.AttemptFrom(r.Context())
		if r.Header.Get("X-Retain") != "" {
			a.RetainAfter(time.Now().Add(ahead))
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	for _, tc := range []struct {
		name   string
		retain bool
		want   time.Duration
	}{
		{"retained after a time ahead", true, ahead + retention},
		{"the retention", false, retention},
	} {
		scope := newScope()
		r := httptest.NewRequest(http.MethodPost, "/jobs", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", scope.Key)
		r.Header.Set("X-Tenant", scope.Tenant)
		if tc.retain {
			r.Header.Set("X-Retain", "1")
		}
		before := time.Now()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		after := time.Now()
		if w.Code != http.StatusAccepted {
			t.Fatalf("%s: status %d", tc.name, w.Code)
		}
		scope.Route = "route"
		rec := mustGet(t, s, scope)
		// The store counts from its own clock; a minute covers a skewed
		// one and a slow store.
		lo, hi := before.Add(tc.want-time.Minute), after.Add(tc.want+time.Minute)
		if rec.State != idempotency.StateCompleted || rec.ExpiresAt.Before(lo) || rec.ExpiresAt.After(hi) {
			t.Errorf("%s: record %s expires at %s, want %s after the request (±1m)", tc.name, rec.State, rec.ExpiresAt, tc.want)
		}
	}
}
