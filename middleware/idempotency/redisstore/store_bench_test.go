package redisstore_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// Round trips of the Lua scripts beyond the sequential claim + complete
// and replay in redisstore_test.go: the 409 path, renewal, release, reads,
// and claim + complete or replay from many goroutines at once.

var benchResp = idempotency.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}}, Body: []byte(`{"id":"pay_1","status":"succeeded"}`)}

func benchStore(b *testing.B) *redisstore.Store {
	b.Helper()
	rdb := testenv.Redis(b)
	prefix := testenv.Prefix()
	s := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	b.Cleanup(func() {
		_ = s.Close()
		deleteKeys(b, rdb, prefix)
	})
	return s
}

func benchClaim(b *testing.B, s *redisstore.Store, sc idempotency.Scope, owner string) idempotency.ClaimResult {
	b.Helper()
	res, err := s.Claim(b.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// BenchmarkClaimInFlight is the 409 path: the claim script finds the
// record in flight and returns it whole.
func BenchmarkClaimInFlight(b *testing.B) {
	s := benchStore(b)
	sc := scope("held")
	if !benchClaim(b, s, sc, "original").Claimed {
		b.Fatal("first claim refused")
	}
	b.ReportAllocs()
	for b.Loop() {
		if res := benchClaim(b, s, sc, "duplicate"); res.Claimed || res.Record.State != idempotency.StateInFlight {
			b.Fatalf("duplicate claim: %+v", res)
		}
	}
}

func BenchmarkRenew(b *testing.B) {
	s := benchStore(b)
	sc := scope("renewed")
	benchClaim(b, s, sc, "o")
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Renew(b.Context(), sc, "o", time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimRelease is a request the upstream did not process: claim,
// then the finish script.
func BenchmarkClaimRelease(b *testing.B) {
	s := benchStore(b)
	var i int
	b.ReportAllocs()
	for b.Loop() {
		i++
		sc := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k" + strconv.Itoa(i)}
		benchClaim(b, s, sc, "o")
		if err := s.Release(b.Context(), sc, "o"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	s := benchStore(b)
	sc := scope("read")
	benchClaim(b, s, sc, "o")
	if err := s.Complete(b.Context(), sc, "o", benchResp, time.Minute); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Get(b.Context(), sc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimCompleteParallel runs claim + complete with unique keys
// from 16 goroutines per CPU: go-redis' pool and Redis' single thread
// decide the throughput.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	s := benchStore(b)
	var n atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sc := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k" + strconv.FormatInt(n.Add(1), 10)}
			res, err := s.Claim(b.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Minute})
			if err != nil || !res.Claimed {
				b.Errorf("claim: %+v %v", res, err)
				return
			}
			if err := s.Complete(b.Context(), sc, "o", benchResp, time.Minute); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkReplayParallel(b *testing.B) {
	s := benchStore(b)
	sc := scope("replayed")
	benchClaim(b, s, sc, "o")
	if err := s.Complete(b.Context(), sc, "o", benchResp, time.Minute); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := s.Claim(b.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o2", Lease: time.Minute, Retention: time.Minute})
			if err != nil || res.Claimed || res.Record.Response == nil {
				b.Errorf("replay claim: %+v %v", res, err)
				return
			}
		}
	})
}
