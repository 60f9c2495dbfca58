package pgstore

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

// BenchmarkStore runs the shared store benchmarks, with batching (the
// default) and with every statement on its own.
func BenchmarkStore(b *testing.B) {
	pool := testkit.Pool(b)
	idempotencytest.Bench(b, func(b *testing.B) idempotency.Store { return newStore(b, pool) })
}

func BenchmarkStoreUnbatched(b *testing.B) {
	pool := testkit.Pool(b)
	idempotencytest.Bench(b, func(b *testing.B) idempotency.Store {
		s := New(pool, WithBatching(0, 0))
		b.Cleanup(s.Close)
		return s
	})
}
