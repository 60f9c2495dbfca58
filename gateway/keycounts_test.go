package gateway

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// TestKeyCountsLastAsLongAsTheRecord: every request a key gets is counted
// beside its record in the store, whichever store, and the counts go
// when the record expires: the key used again starts from zero.
func TestKeyCountsLastAsLongAsTheRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) idempotency.Store
	}{
		{"memory", func(*testing.T) idempotency.Store { return memstore.New() }},
		{"redis", func(t *testing.T) idempotency.Store {
			s := redisstore.New(testkit.Redis(t), redisstore.WithPrefix(testkit.Prefix()))
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"postgres", func(t *testing.T) idempotency.Store {
			s := pgstore.New(testkit.Pool(t))
			t.Cleanup(s.Close)
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := tc.store(t)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
			t.Cleanup(up.Close)
			upURL, _ := url.Parse(up.URL)
			opts := testOptions(nil)
			opts.Store = store
			const retention = 2 * time.Second
			opts.Routes = []RouteOptions{{Name: "payments", Methods: []string{http.MethodPost}, Path: "/v1/payments", Upstream: upURL,
				Idempotency: idempotency.Config{Retention: retention, Lease: time.Second}}}
			g := newTestGateway(t, opts)
			public := httptest.NewServer(g.Handler())
			t.Cleanup(public.Close)
			post := func(body string) int {
				t.Helper()
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, public.URL+"/v1/payments", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testAPIKey)
				req.Header.Set("Idempotency-Key", "pay-1")
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				return resp.StatusCode
			}
			scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "pay-1"}
			counter := store.(idempotency.RequestCounter)
			// waitCounts polls until the counts are want: they reach the
			// store about a second after the requests.
			waitCounts := func(what string, want idempotency.KeyCount) {
				t.Helper()
				deadline := time.Now().Add(15 * time.Second)
				for {
					got, err := counter.RequestCounts(t.Context(), scope)
					if err == nil && got.New == want.New && got.Replayed == want.Replayed && got.Mismatch == want.Mismatch &&
						got.Conflict == want.Conflict && got.Released == want.Released {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: counts %+v (%v), want %+v", what, got, err, want)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}

			before := time.Now()
			if s := post(`{"a":1}`); s != http.StatusCreated {
				t.Fatalf("first request: %d", s)
			}
			const replays = 5
			for range replays {
				if s := post(`{"a":1}`); s != http.StatusCreated {
					t.Fatalf("replay: %d", s)
				}
			}
			if s := post(`{"a":2}`); s != http.StatusUnprocessableEntity {
				t.Fatalf("the key reused: %d", s)
			}
			waitCounts("the requests of a live record", idempotency.KeyCount{New: 1, Replayed: replays, Mismatch: 1})
			got, _ := counter.RequestCounts(t.Context(), scope)
			if got.First.Before(before.Add(-time.Second)) || got.Last.Before(got.First) || got.Last.After(time.Now().Add(time.Second)) {
				t.Errorf("first %s, last %s: want both since %s, in order", got.First, got.Last, before)
			}

			deadline := time.Now().Add(15 * time.Second)
			for {
				_, err := counter.RequestCounts(t.Context(), scope)
				if errors.Is(err, idempotency.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the counts outlived the record's retention of %s: %v", retention, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if s := post(`{"a":3}`); s != http.StatusCreated {
				t.Fatalf("the key used again after its record expired: %d", s)
			}
			waitCounts("the key used again", idempotency.KeyCount{New: 1})
		})
	}
}
