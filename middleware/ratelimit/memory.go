package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-limiter"
)

var (
	_ StoreFunc     = MemoryStore
	_ limiter.Store = (*Memory)(nil)
)

// MemoryStore is a StoreFunc that keeps budgets in the process, in a
// Memory store: right for one gateway instance, or for tests. Several
// instances each with a MemoryStore each grant the whole budget.
func MemoryStore(l Limit) (limiter.Store, error) {
	return NewMemory(MemoryConfig{Tokens: l.Tokens, Interval: l.Interval})
}

// MemoryConfig configures a Memory store. The zero value of every field
// means its default.
type MemoryConfig struct {
	// Tokens is the number of Takes allowed per Interval, any number from
	// 1 up. Default 1.
	Tokens uint64
	// Interval is the length of each budget window, any positive
	// duration. Default 1s.
	Interval time.Duration
	// IdleTTL: a bucket whose interval ended this long ago is forgotten
	// (it is full anyway; a limit given by Set goes with it). Default
	// 12h.
	IdleTTL time.Duration
	// Now is the clock. Default time.Now, whose monotonic reading keeps
	// intervals exact across wall-clock steps.
	Now func() time.Time
}

// Memory is a limiter.Store in the process memory with the semantics of
// redislimit: a key gets Tokens per Interval, the interval starts at the
// key's first Take and the budget refills in full when it ends (a fixed
// window), so both stores grant a tenant the same budget.
//
// It replaces go-limiter's memorystore, whose refill computes
// interval/tokens tokens per elapsed interval (v0.7.1) and so silently cuts
// every budget above √(interval in ns) — 1e8 per second became 10. Here
// the counts are integers and the windows durations: exact for any budget.
type Memory struct {
	tokens   uint64
	interval time.Duration
	idle     time.Duration
	now      func() time.Time

	mu        sync.RWMutex // guards buckets; each bucket has its own lock
	buckets   map[string]*bucket
	nextSweep atomic.Int64 // Unix ns of the clock: when Take next sweeps
	stopped   atomic.Bool
}

// sweepEvery is how often Take looks for buckets to forget.
const sweepEvery = time.Minute

// NewMemory returns a Memory store. It starts no goroutine: idle buckets
// are swept by Take, at most once a minute.
func NewMemory(c MemoryConfig) (*Memory, error) {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval: %s is negative", c.Interval))
	}
	if c.IdleTTL < 0 {
		errs = append(errs, fmt.Errorf("idle_ttl: %s is negative", c.IdleTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ratelimit: memory store: %w", err)
	}
	m := &Memory{tokens: c.Tokens, interval: c.Interval, idle: c.IdleTTL, now: c.Now, buckets: make(map[string]*bucket)}
	if m.tokens == 0 {
		m.tokens = 1
	}
	if m.interval == 0 {
		m.interval = time.Second
	}
	if m.idle == 0 {
		m.idle = 12 * time.Hour
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m, nil
}

// bucket is one key's budget: the current interval and what is left of
// it.
type bucket struct {
	mu       sync.Mutex
	tokens   uint64 // the limit
	interval time.Duration
	start    time.Time // of the current interval
	avail    uint64
	// swept: the bucket left the map; a Take that found it before
	// must look again.
	swept bool
}

// advance moves b to the interval that holds now, refilled when it is a
// later one. A clock that went back (a test's) starts the interval again.
func (b *bucket) advance(now time.Time) {
	elapsed := now.Sub(b.start)
	switch {
	case elapsed < 0:
		b.start = now
	case elapsed >= b.interval:
		b.start = b.start.Add(elapsed / b.interval * b.interval)
		b.avail = b.tokens
	}
}

// reset is the end of the current interval in Unix nanoseconds.
func (b *bucket) reset() uint64 { return uint64(b.start.Add(b.interval).UnixNano()) }

// locked returns key's bucket, locked, made full on the store's limit
// when there is none.
func (m *Memory) locked(key string, now time.Time) *bucket {
	for {
		b := m.bucket(key, now)
		b.mu.Lock()
		if !b.swept {
			return b
		}
		b.mu.Unlock()
	}
}

func (m *Memory) bucket(key string, now time.Time) *bucket {
	m.mu.RLock()
	b, ok := m.buckets[key]
	m.mu.RUnlock()
	if ok {
		return b
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.buckets[key]; ok {
		return b
	}
	b = &bucket{tokens: m.tokens, interval: m.interval, start: now, avail: m.tokens}
	m.buckets[key] = b
	return b
}

// Take takes a token from key's bucket. It returns the bucket's limit, the
// tokens left, the end of the current interval (Unix nanoseconds) and
// whether a token was taken; after Close, limiter.ErrStopped.
func (m *Memory) Take(_ context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error) {
	if m.stopped.Load() {
		return 0, 0, 0, false, limiter.ErrStopped
	}
	now := m.now()
	m.sweep(now)
	b := m.locked(key, now)
	defer b.mu.Unlock()
	b.advance(now)
	if b.avail > 0 {
		b.avail--
		ok = true
	}
	return b.tokens, b.avail, b.reset(), ok, nil
}

// TakeN takes n tokens from key's bucket, all or none, and returns what
// Take does: ok is whether they were taken.
func (m *Memory) TakeN(_ context.Context, key string, n uint64) (tokens, remaining, reset uint64, ok bool, err error) {
	if m.stopped.Load() {
		return 0, 0, 0, false, limiter.ErrStopped
	}
	now := m.now()
	m.sweep(now)
	b := m.locked(key, now)
	defer b.mu.Unlock()
	b.advance(now)
	if b.avail >= n {
		b.avail -= n
		ok = true
	}
	return b.tokens, b.avail, b.reset(), ok, nil
}

// Get returns key's limit and the tokens left in the current interval,
// without taking one or changing anything; 0, 0 for a key the store does
// not hold.
func (m *Memory) Get(_ context.Context, key string) (tokens, remaining uint64, err error) {
	if m.stopped.Load() {
		return 0, 0, limiter.ErrStopped
	}
	m.mu.RLock()
	b, ok := m.buckets[key]
	m.mu.RUnlock()
	if !ok {
		return 0, 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.now().Sub(b.start) >= b.interval {
		return b.tokens, b.tokens, nil // a later interval: full
	}
	return b.tokens, b.avail, nil
}

// Set gives key its own limit, replacing its bucket with a full one whose
// interval starts now. The limit lasts until the bucket is swept.
func (m *Memory) Set(_ context.Context, key string, tokens uint64, interval time.Duration) error {
	if m.stopped.Load() {
		return limiter.ErrStopped
	}
	if interval <= 0 {
		return fmt.Errorf("ratelimit: memory store: set: interval %s must be positive", interval)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.buckets[key]; ok {
		old.mu.Lock()
		old.swept = true
		old.mu.Unlock()
	}
	m.buckets[key] = &bucket{tokens: tokens, interval: interval, start: m.now(), avail: tokens}
	return nil
}

// Burst adds tokens to key's bucket for the rest of its current interval;
// the next interval starts from the limit again.
func (m *Memory) Burst(_ context.Context, key string, tokens uint64) error {
	if m.stopped.Load() {
		return limiter.ErrStopped
	}
	now := m.now()
	b := m.locked(key, now)
	defer b.mu.Unlock()
	b.advance(now)
	if b.avail > math.MaxUint64-tokens {
		b.avail = math.MaxUint64
	} else {
		b.avail += tokens
	}
	return nil
}

// Close stops the store and forgets its buckets: every later call returns
// limiter.ErrStopped.
func (m *Memory) Close(context.Context) error {
	m.stopped.Store(true)
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.buckets)
	return nil
}

// sweep forgets the buckets whose interval ended IdleTTL ago, once per
// sweepEvery, in the Take that finds it due.
func (m *Memory) sweep(now time.Time) {
	next := m.nextSweep.Load()
	if now.UnixNano() < next || !m.nextSweep.CompareAndSwap(next, now.Add(sweepEvery).UnixNano()) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, b := range m.buckets {
		b.mu.Lock()
		if now.Sub(b.start.Add(b.interval)) >= m.idle {
			b.swept = true
			delete(m.buckets, key)
		}
		b.mu.Unlock()
	}
}
