package redisstore_test

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// BenchmarkStore runs the shared store benchmarks, each store under a
// prefix of its own whose keys are deleted afterwards.
func BenchmarkStore(b *testing.B) {
	rdb := testenv.Redis(b)
	idempotencytest.Bench(b, func(b *testing.B) idempotency.Store {
		prefix := testenv.Prefix()
		s := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		b.Cleanup(func() {
			_ = s.Close()
			deleteKeys(b, rdb, prefix)
		})
		return s
	})
}
