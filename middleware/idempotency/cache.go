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
	ttl      time.Duration
	maxBody  int
	maxBytes int

	mu      sync.Mutex
	entries map[Scope]cached
	ring    []Scope // insertion order, oldest at head; may hold scopes already gone
	head, n int
	bytes   int // the cached responses' approximate size
	now     func() time.Time
}

type cached struct {
	rec   Record
	until time.Time
	size  int
}

// maxCachedBody: a larger stored response is always read from the store.
// maxCacheBytes bounds what all cached responses hold together.
const (
	maxCachedBody = 64 << 10
	maxCacheBytes = 32 << 20
)

// NewReplayCache returns a cache of at most entries records, each kept for
// at most ttl, and of at most 32 MiB of responses. It returns nil, a cache
// that is off, when entries or ttl is zero.
func NewReplayCache(entries int, ttl time.Duration) *ReplayCache {
	if entries <= 0 || ttl <= 0 {
		return nil
	}
	return &ReplayCache{
		ttl: ttl, maxBody: maxCachedBody, maxBytes: maxCacheBytes,
		entries: make(map[Scope]cached, min(entries, 1<<16)), ring: make([]Scope, entries),
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
		c.drop(scope)
		return Record{}, false
	}
	return e.rec, true
}

// put caches rec if it is a completed record with a stored response small
// enough to keep. Expired entries at the head go first, then the oldest
// while the cache is over its entries or its bytes.
func (c *ReplayCache) put(rec Record) {
	if c == nil || rec.State != StateCompleted || rec.Response == nil || len(rec.Response.Body) > c.maxBody {
		return
	}
	now := c.now()
	size := responseSize(rec)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(rec.Scope)
	for c.n > 0 {
		oldest := c.ring[c.head]
		e, live := c.entries[oldest]
		if live && now.Before(e.until) && c.n < len(c.ring) && c.bytes+size <= c.maxBytes {
			break
		}
		c.drop(oldest)
		c.ring[c.head] = Scope{}
		c.head = (c.head + 1) % len(c.ring)
		c.n--
	}
	c.ring[(c.head+c.n)%len(c.ring)] = rec.Scope
	c.n++
	c.entries[rec.Scope] = cached{rec: rec, until: now.Add(c.ttl), size: size}
	c.bytes += size
}

// drop removes scope's entry, if any. Callers hold mu.
func (c *ReplayCache) drop(scope Scope) {
	if e, ok := c.entries[scope]; ok {
		c.bytes -= e.size
		delete(c.entries, scope)
	}
}

// responseSize approximates the memory a cached record holds.
func responseSize(rec Record) int {
	n := 256 + len(rec.Scope.Tenant) + len(rec.Scope.Route) + len(rec.Scope.Key) + len(rec.Fingerprint) + len(rec.Response.Body)
	for k, vs := range rec.Response.Header {
		n += len(k) + 32
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return n
}

// Forget drops scope's record, after it was deleted from the store.
func (c *ReplayCache) Forget(scope Scope) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(scope)
}
