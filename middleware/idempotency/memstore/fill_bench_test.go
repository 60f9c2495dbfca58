package memstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// BenchmarkNewKey is a new key's claim and completion, with a small stored
// answer, on a store holding a steady number of live records (the oldest
// is deleted as each new one comes, as retention would): what a
// unique-key request costs the store by how full it is, the garbage
// collector's marking of the records included.
func BenchmarkNewKey(b *testing.B) {
	hdr := map[string][]string{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}}
	body := []byte(`{"id":"pay_1","object":"payment","status":"succeeded","amount_cents":1250,"currency":"EUR"}`)
	for _, live := range []int{10_000, 100_000, 1_000_000} {
		b.Run("live="+strconv.Itoa(live), func(b *testing.B) {
			s := memstore.New()
			ctx := b.Context()
			i := 0
			one := func() {
				i++
				sc := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k" + strconv.Itoa(i)}
				owner := "owner-" + strconv.Itoa(i)
				if _, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp-" + strconv.Itoa(i),
					Owner: owner, Lease: time.Minute, Retention: time.Hour}); err != nil {
					b.Fatal(err)
				}
				if err := s.Complete(ctx, sc, owner, idempotency.Response{Status: 201, Header: hdr, Body: body}, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			for range live {
				one()
			}
			b.ReportAllocs()
			for b.Loop() {
				one()
				_ = s.Delete(ctx, idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k" + strconv.Itoa(i-live)})
			}
		})
	}
}
