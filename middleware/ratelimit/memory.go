package ratelimit

import (
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
)

var _ StoreFunc = MemoryStore

// MemoryStore is a StoreFunc that keeps budgets in the process, in a
// go-limiter memorystore: right for one gateway instance, or for tests.
// Several instances each with a MemoryStore each grant the whole budget.
//
// Buckets idle for 12 hours, or for one interval when that is longer, are
// swept (a shorter sweep would forget a tenant that is still waiting out a
// long interval).
func MemoryStore(l Limit) (limiter.Store, error) {
	const minTTL = 12 * time.Hour // memorystore's default
	return memorystore.New(&memorystore.Config{
		Tokens:      l.Tokens,
		Interval:    l.Interval,
		SweepMinTTL: max(minTTL, l.Interval),
	})
}
