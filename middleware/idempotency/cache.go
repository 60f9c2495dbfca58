package idempotency

import (
	"sync"
	"time"
)

// ReplayCache keeps completed records in process memory for a short while,
// so that a burst of retries of one request is answered without a store
// round trip. Only completed records enter it — a claim in flight, a
// released or an unknown outcome never does — and a completed record is
// final until its retention ends, so what the cache replays is what the
// store would. The one exception is an operator deleting a record (key
// repair) on another instance: this one may replay the old response for up
// to the cache's TTL. Deletes through this process's admin API call Forget.
//
// One ReplayCache may serve many routes (scopes name the route); it is safe
// for concurrent use. The zero value is not usable; call NewReplayCache.
type ReplayCache struct {
	ttl     time.Duration
	maxBody int

	mu      sync.Mutex
	entries map[Scope]cached
	ring    []Scope // insertion order; the oldest is evicted first
	next    int
	now     func() time.Time
}

type cached struct {
	rec   Record
	until time.Time
}

// maxCachedBody: a larger stored response is always read from the store.
const maxCachedBody = 64 << 10

// NewReplayCache returns a cache of at most entries records, each kept for
// at most ttl. It returns nil, a cache that is off, when either is zero.
func NewReplayCache(entries int, ttl time.Duration) *ReplayCache {
	if entries <= 0 || ttl <= 0 {
		return nil
	}
	return &ReplayCache{
		ttl: ttl, maxBody: maxCachedBody,
		entries: make(map[Scope]cached, entries), ring: make([]Scope, entries),
		now: time.Now,
	}
}

// get returns the cached completed record of scope, if any is still fresh
// and within its retention.
func (c *ReplayCache) get(scope Scope) (Record, bool) {
	if c == nil {
		return Record{}, false
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[scope]
	if !ok {
		return Record{}, false
	}
	if !now.Before(e.until) || !now.Before(e.rec.ExpiresAt) {
		delete(c.entries, scope)
		return Record{}, false
	}
	return e.rec, true
}

// put caches rec if it is a completed record with a stored response small
// enough to keep.
func (c *ReplayCache) put(rec Record) {
	if c == nil || rec.State != StateCompleted || rec.Response == nil || len(rec.Response.Body) > c.maxBody {
		return
	}
	until := c.now().Add(c.ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[rec.Scope]; !ok {
		if old := c.ring[c.next]; old != (Scope{}) {
			delete(c.entries, old)
		}
		c.ring[c.next] = rec.Scope
		c.next = (c.next + 1) % len(c.ring)
	}
	c.entries[rec.Scope] = cached{rec: rec, until: until}
}

// Forget drops scope's record, after it was deleted from the store.
func (c *ReplayCache) Forget(scope Scope) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, scope)
}
