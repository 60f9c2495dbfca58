package redisstore_test

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// BenchmarkStore runs the shared store benchmarks, each store under a
// prefix of its own whose keys are deleted afterwards.
func BenchmarkStore(b *testing.B) {
	rdb := testkit.Redis(b)
	idempotencytest.Bench(b, func(b *testing.B) idempotency.Store {
		prefix := testkit.Prefix()
		s := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		b.Cleanup(func() {
			_ = s.Close()
			deleteKeys(b, rdb, prefix)
		})
		return s
	})
}
