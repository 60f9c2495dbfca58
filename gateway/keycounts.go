package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// KeyCountsInterval is how often a gateway adds the request counts it
// holds to a store that keeps them (idempotency.RequestCounter). Counts
// thus lag the requests by up to this long, and a crash loses at most
// this long of them.
const KeyCountsInterval = time.Second

// keyCountsFlushAt is how many keys the counts hold before they are added
// to the store ahead of the interval.
const keyCountsFlushAt = 4096

// keyCountsMax bounds the keys the counts hold while the store is slow to
// take them; a request with a key beyond it is not counted.
const keyCountsMax = 4 * keyCountsFlushAt

// keyCounts gathers how many requests of each kind each idempotency key
// received at this instance and adds them to the store in batches, from
// one goroutine, so that a request never waits on a round trip of its
// own: it only adds to a map under a mutex. The store keeps the sums
// beside each record, for as long as the record lives.
type keyCounts struct {
	store  idempotency.RequestCounter
	logger *slog.Logger

	mu      sync.Mutex
	pending map[idempotency.Scope]idempotency.KeyCount
	dropped int64 // requests not counted since the last flush: keyCountsMax reached
	closed  bool

	spare map[idempotency.Scope]idempotency.KeyCount // the flusher's own
	batch []idempotency.KeyCount                     // the flusher's own
	full  chan struct{}                              // keyCountsFlushAt reached
	stop  chan struct{}
	done  chan struct{}
	// closeCtx bounds the last flush; set before stop is closed.
	closeCtx  context.Context
	closeOnce sync.Once
}

// newKeyCounts returns the counts for store, or nil when store keeps
// none. start starts adding them to it; close stops.
func newKeyCounts(store idempotency.Store, logger *slog.Logger) *keyCounts {
	rc, ok := store.(idempotency.RequestCounter)
	if !ok {
		return nil
	}
	k := &keyCounts{
		store: rc, logger: logger,
		pending: make(map[idempotency.Scope]idempotency.KeyCount),
		spare:   make(map[idempotency.Scope]idempotency.KeyCount),
		full:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	return k
}

// start starts the goroutine that adds the counts to the store, which
// close stops.
func (k *keyCounts) start() {
	if k != nil {
		go k.run()
	}
}

// observe counts a request on scope that ended at at with the
// middleware's outcome and stored state; other outcomes are not counted.
func (k *keyCounts) observe(scope idempotency.Scope, outcome, stored string, at time.Time) {
	if k == nil || scope.Key == "" {
		return
	}
	kind, ok := recentKindOf(outcome, stored)
	if !ok {
		return
	}
	k.mu.Lock()
	c, seen := k.pending[scope]
	switch {
	case k.closed:
		k.mu.Unlock()
		return
	case !seen && len(k.pending) >= keyCountsMax:
		k.dropped++
		k.mu.Unlock()
		return
	case !seen:
		c = idempotency.KeyCount{Scope: scope, First: at}
	}
	switch kind {
	case RecentNew:
		c.New++
	case RecentReplayed:
		c.Replayed++
	case RecentConflict:
		c.Conflict++
	case RecentMismatch:
		c.Mismatch++
	case RecentReleased:
		c.Released++
	}
	if at.Before(c.First) {
		c.First = at
	}
	if at.After(c.Last) {
		c.Last = at
	}
	k.pending[scope] = c
	n := len(k.pending)
	k.mu.Unlock()
	if n == keyCountsFlushAt {
		select {
		case k.full <- struct{}{}:
		default:
		}
	}
}

func (k *keyCounts) run() {
	defer close(k.done)
	t := time.NewTicker(KeyCountsInterval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			k.flush(k.closeCtx)
			return
		case <-t.C:
		case <-k.full:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*KeyCountsInterval)
		k.flush(ctx)
		cancel()
	}
}

// flush adds what the counts hold to the store. A batch the store refuses
// is dropped, not kept for the next: a count is worth less than a bound on
// what the gateway holds.
func (k *keyCounts) flush(ctx context.Context) {
	k.mu.Lock()
	held := k.pending
	k.pending, k.spare = k.spare, nil
	dropped := k.dropped
	k.dropped = 0
	k.mu.Unlock()
	defer func() {
		clear(held)
		k.spare = held
	}()
	if dropped > 0 {
		k.logger.Warn("idempotency key counts: requests not counted, too many keys waiting for the store", "requests", dropped, "keys", keyCountsMax)
	}
	if len(held) == 0 {
		return
	}
	k.batch = k.batch[:0]
	for _, c := range held {
		k.batch = append(k.batch, c)
	}
	if err := k.store.AddRequests(ctx, k.batch); err != nil {
		k.logger.Warn("idempotency key counts: adding to the store failed; these counts are lost", "keys", len(k.batch), "err", err)
	}
	clear(k.batch)
}

// close stops counting and adds what the counts still hold, within ctx.
func (k *keyCounts) close(ctx context.Context) error {
	if k == nil {
		return nil
	}
	k.closeOnce.Do(func() {
		k.mu.Lock()
		k.closed = true
		k.mu.Unlock()
		k.closeCtx = ctx
		close(k.stop)
	})
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
