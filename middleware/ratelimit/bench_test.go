package ratelimit_test

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/ratelimit"
)

func BenchmarkTake(b *testing.B) {
	cases := []struct {
		name  string
		limit ratelimit.Limit
	}{
		{"allowed", ratelimit.Limit{Tokens: math.MaxUint64, Interval: time.Hour}},
		{"denied", ratelimit.Limit{Tokens: 1, Interval: time.Hour}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			store, err := ratelimit.MemoryStore(c.limit)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = store.Close(context.Background()) })
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, _, err := store.Take(ctx, "acme"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWrap measures the whole middleware, headers included, on a
// memory store.
func BenchmarkWrap(b *testing.B) {
	cases := []struct {
		name   string
		tenant string
		limit  ratelimit.Limit
	}{
		{"unlimited", "globex", ratelimit.Limit{Tokens: 1, Interval: time.Hour}},
		{"allowed", "acme", ratelimit.Limit{Tokens: math.MaxUint64, Interval: time.Hour}},
		{"denied", "acme", ratelimit.Limit{Tokens: 1, Interval: time.Hour}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			lim, err := ratelimit.New(ratelimit.Limits{"acme": c.limit}, ratelimit.MemoryStore, ratelimit.Config{
				Key:       func(*http.Request) string { return c.tenant },
				OnLimited: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusTooManyRequests) },
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = lim.Close(context.Background()) })
			h := lim.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, "/v1/payments", nil)
			w := &discard{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
		})
	}
}

// discard is a ResponseWriter that keeps nothing but its header map, so the
// benchmark measures the middleware and not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
