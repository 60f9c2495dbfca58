package pgstore

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Round trips of the store's statements beyond the sequential claim +
// complete and replay in pgstore_test.go: the 409 path, renewal, release,
// reads, and the same work from many goroutines at once, which is where
// PostgreSQL's commit and lock behaviour shows.

var benchResp = idempotency.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}}, Body: []byte(`{"id":"pay_1","status":"succeeded"}`)}

func benchClaim(b *testing.B, s *Store, scope idempotency.Scope, owner string) idempotency.ClaimResult {
	b.Helper()
	res, err := s.Claim(b.Context(), idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// BenchmarkClaimInFlight is the 409 path: a claim that finds the record in
// flight under another owner.
func BenchmarkClaimInFlight(b *testing.B) {
	s := newStore(b, testenv.Pool(b))
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "held"}
	if !benchClaim(b, s, scope, "original").Claimed {
		b.Fatal("first claim refused")
	}
	b.ReportAllocs()
	for b.Loop() {
		if res := benchClaim(b, s, scope, "duplicate"); res.Claimed || res.Record.State != idempotency.StateInFlight {
			b.Fatalf("duplicate claim: %+v", res)
		}
	}
}

func BenchmarkRenew(b *testing.B) {
	s := newStore(b, testenv.Pool(b))
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "renewed"}
	benchClaim(b, s, scope, "o")
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Renew(b.Context(), scope, "o", time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimRelease is a request the upstream did not process (503,
// unreachable): claim, then release.
func BenchmarkClaimRelease(b *testing.B) {
	s := newStore(b, testenv.Pool(b))
	var i int
	b.ReportAllocs()
	for b.Loop() {
		i++
		scope := idempotency.Scope{Tenant: "t", Route: "r", Key: strconv.Itoa(i)}
		benchClaim(b, s, scope, "o")
		if err := s.Release(b.Context(), scope, "o"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	s := newStore(b, testenv.Pool(b))
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "read"}
	benchClaim(b, s, scope, "o")
	if err := s.Complete(b.Context(), scope, "o", benchResp, time.Hour); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Get(b.Context(), scope); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimCompleteParallel runs claim + complete with unique keys
// from 16 goroutines per CPU, as a loaded gateway does: the ns/op is the
// inverse of the store's throughput.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	s := newStore(b, testenv.Pool(b))
	var n atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			scope := idempotency.Scope{Tenant: "t", Route: "r", Key: strconv.FormatInt(n.Add(1), 10)}
			res, err := s.Claim(b.Context(), idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour})
			if err != nil || !res.Claimed {
				b.Errorf("claim: %+v %v", res, err)
				return
			}
			if err := s.Complete(b.Context(), scope, "o", benchResp, time.Hour); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReplayParallel replays one completed key from 16 goroutines per
// CPU: every replay is a claim on the same row.
func BenchmarkReplayParallel(b *testing.B) {
	s := newStore(b, testenv.Pool(b))
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "replayed"}
	benchClaim(b, s, scope, "o")
	if err := s.Complete(b.Context(), scope, "o", benchResp, time.Hour); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := s.Claim(b.Context(), idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "o2", Lease: time.Minute, Retention: time.Hour})
			if err != nil || res.Claimed || res.Record.Response == nil {
				b.Errorf("replay claim: %+v %v", res, err)
				return
			}
		}
	})
}
