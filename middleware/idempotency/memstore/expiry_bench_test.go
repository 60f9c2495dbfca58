package memstore_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// BenchmarkJanitorPass is one janitor pass (DeleteExpired, batch 1000)
// over a store of live records with none due, the usual case between
// expiries: it holds the mutex every request needs for as long as it
// runs, so its cost must not grow with the records held.
func BenchmarkJanitorPass(b *testing.B) {
	for _, live := range []int{10_000, 1_000_000} {
		b.Run("live="+strconv.Itoa(live), func(b *testing.B) {
			s := memstore.New()
			ctx := b.Context()
			for i := range live {
				sc := idempotency.Scope{Tenant: "t", Route: "r", Key: "k" + strconv.Itoa(i)}
				if _, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o",
					Lease: time.Minute, Retention: time.Hour}); err != nil {
					b.Fatal(err)
				}
				if err := s.Complete(ctx, sc, "o", idempotency.Response{Status: 201}, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if n, err := s.DeleteExpired(ctx, 1000); err != nil || n != 0 {
					b.Fatal(fmt.Sprint(n, err))
				}
			}
		})
	}
}
