package idempotency_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// RetainAfter keeps a stored answer for the retention after its time:
// a time past, however far (1600, where UnixNano wraps into 2184), keeps
// it the retention from now; one past 2262, where UnixNano wraps too,
// keeps it until then, not until a wrapped past.
func TestRetainAfterOutOfRange(t *testing.T) {
	t.Parallel()
	const retention = time.Hour
	for _, tc := range []struct {
		name        string
		at          time.Time
		least, most time.Time // the stored record's expiry
	}{
		{"a minute ago", time.Now().Add(-time.Minute), time.Now(), time.Now().Add(2 * retention)},
		{"1600", time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Now(), time.Now().Add(2 * retention)},
		{"in a week", time.Now().Add(7 * 24 * time.Hour), time.Now().Add(7 * 24 * time.Hour), time.Now().Add(7*24*time.Hour + 2*retention)},
		{"3000", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		store := memstore.New()
		srv := newMW(t, store, idempotency.Config{Retention: retention}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a, _ := idempotency.AttemptFrom(r.Context())
			a.RetainAfter(tc.at)
			w.WriteHeader(http.StatusAccepted)
		}))
		if w := do(srv, call{key: "k"}); w.Code != http.StatusAccepted {
			t.Fatalf("%s: %d", tc.name, w.Code)
		}
		rec, err := store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if rec.ExpiresAt.Before(tc.least) || rec.ExpiresAt.After(tc.most) {
			t.Errorf("%s: the record expires %s, want between %s and %s", tc.name, rec.ExpiresAt, tc.least, tc.most)
		}
	}
}
