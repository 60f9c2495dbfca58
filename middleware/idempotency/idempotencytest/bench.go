package idempotencytest

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Bench runs the store benchmarks against a store made by newStore, one
// per benchmark: the round trips of each operation, and new requests and
// replays from many goroutines at once, which is where a store's commit
// and lock behaviour shows. A store's test calls it from one Benchmark
// function:
//
//	func BenchmarkStore(b *testing.B) { idempotencytest.Bench(b, newBenchStore) }
func Bench(b *testing.B, newStore func(b *testing.B) idempotency.Store) {
	for _, bm := range []struct {
		name string
		fn   func(*testing.B, benchStore)
	}{
		{"ClaimComplete", benchClaimComplete},
		{"ClaimReplay", benchClaimReplay},
		{"ClaimInFlight", benchClaimInFlight},
		{"Renew", benchRenew},
		{"ClaimRelease", benchClaimRelease},
		{"Get", benchGet},
		{"ClaimCompleteParallel", benchClaimCompleteParallel},
		{"ReplayParallel", benchReplayParallel},
	} {
		b.Run(bm.name, func(b *testing.B) {
			// A tenant of its own per run: stores may share a database, and
			// a benchmark function runs more than once.
			bm.fn(b, benchStore{Store: newStore(b), tenant: newScope().Tenant})
		})
	}
}

var benchResp = idempotency.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}}, Body: []byte(`{"id":"pay_1","status":"succeeded"}`)}

// benchStore is a store and the tenant a benchmark run uses in it.
type benchStore struct {
	idempotency.Store
	tenant string
}

func (s benchStore) req(key, owner string) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{Scope: idempotency.Scope{Tenant: s.tenant, Route: "r", Key: key}, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Hour}
}

func benchClaim(b *testing.B, s benchStore, key, owner string) idempotency.ClaimResult {
	b.Helper()
	res, err := s.Claim(b.Context(), s.req(key, owner))
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// benchCompleted leaves key completed.
func benchCompleted(b *testing.B, s benchStore, key string) {
	b.Helper()
	if !benchClaim(b, s, key, "o").Claimed {
		b.Fatalf("first claim of %s refused", key)
	}
	if err := s.Complete(b.Context(), s.req(key, "o").Scope, "o", benchResp, time.Hour); err != nil {
		b.Fatal(err)
	}
}

// benchClaimComplete is a new request: claim, then complete.
func benchClaimComplete(b *testing.B, s benchStore) {
	var i int
	b.ReportAllocs()
	for b.Loop() {
		i++
		req := s.req(strconv.Itoa(i), "o")
		if res, err := s.Claim(b.Context(), req); err != nil || !res.Claimed {
			b.Fatalf("Claim: %+v %v", res, err)
		}
		if err := s.Complete(b.Context(), req.Scope, "o", benchResp, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClaimReplay is a retry: a claim that finds the record completed.
func benchClaimReplay(b *testing.B, s benchStore) {
	benchCompleted(b, s, "replayed")
	b.ReportAllocs()
	for b.Loop() {
		if res := benchClaim(b, s, "replayed", "o2"); res.Claimed || res.Record.Response == nil {
			b.Fatalf("replay claim: %+v", res)
		}
	}
}

// benchClaimInFlight is the 409 path: a claim that finds the record in
// flight under another owner.
func benchClaimInFlight(b *testing.B, s benchStore) {
	if !benchClaim(b, s, "held", "original").Claimed {
		b.Fatal("first claim refused")
	}
	b.ReportAllocs()
	for b.Loop() {
		if res := benchClaim(b, s, "held", "duplicate"); res.Claimed || res.Record.State != idempotency.StateInFlight {
			b.Fatalf("duplicate claim: %+v", res)
		}
	}
}

func benchRenew(b *testing.B, s benchStore) {
	req := s.req("renewed", "o")
	benchClaim(b, s, "renewed", "o")
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Renew(b.Context(), req.Scope, "o", time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClaimRelease is a request the upstream did not process (503,
// unreachable): claim, then release.
func benchClaimRelease(b *testing.B, s benchStore) {
	var i int
	b.ReportAllocs()
	for b.Loop() {
		i++
		req := s.req(strconv.Itoa(i), "o")
		benchClaim(b, s, req.Scope.Key, "o")
		if err := s.Release(b.Context(), req.Scope, "o"); err != nil {
			b.Fatal(err)
		}
	}
}

func benchGet(b *testing.B, s benchStore) {
	benchCompleted(b, s, "read")
	scope := s.req("read", "").Scope
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Get(b.Context(), scope); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClaimCompleteParallel runs claim + complete with unique keys from
// 16 goroutines per CPU, as a loaded gateway does: the ns/op is the
// inverse of the store's throughput.
func benchClaimCompleteParallel(b *testing.B, s benchStore) {
	var n atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := s.req(strconv.FormatInt(n.Add(1), 10), "o")
			res, err := s.Claim(b.Context(), req)
			if err != nil || !res.Claimed {
				b.Errorf("claim: %+v %v", res, err)
				return
			}
			if err := s.Complete(b.Context(), req.Scope, "o", benchResp, time.Hour); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchReplayParallel replays one completed key from 16 goroutines per
// CPU.
func benchReplayParallel(b *testing.B, s benchStore) {
	benchCompleted(b, s, "replayed")
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := s.Claim(b.Context(), s.req("replayed", "o2"))
			if err != nil || res.Claimed || res.Record.Response == nil {
				b.Errorf("replay claim: %+v %v", res, err)
				return
			}
		}
	})
}
