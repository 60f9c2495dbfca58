package redisstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// BenchmarkWait is what WithWait costs a new key, a claim and its
// completion, against a private primary with one replica on loopback:
// one at a time (the latency a request adds) and in parallel (where one
// WAIT covers a batch).
func BenchmarkWait(b *testing.B) {
	primary, _ := testkit.RedisReplicated(b)
	for _, bc := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"off", nil},
		{"replicas=1", []redisstore.Option{redisstore.WithWait(1, time.Second)}},
	} {
		s := redisstore.New(primary.Client, append(bc.opts, redisstore.WithPrefix(waitPrefix))...)
		var n atomic.Int64
		run := func(b *testing.B) {
			i := strconv.FormatInt(n.Add(1), 10)
			sc, owner := scope(bc.name+i), "o"+i
			ctx := b.Context()
			if _, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Minute}); err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, sc, owner, idempotency.Response{Status: 201}, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(bc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				run(b)
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					run(b)
				}
			})
		})
		_ = s.Close()
	}
}
