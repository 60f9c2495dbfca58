package redisstore

import (
	"context"
	"sync"
)

// Deadlines. Every round trip runs on a goroutine of the store's, so a caller
// returns when ctx ends even where go-redis ignores ctx. Close waits for those
// goroutines. A script whose caller gave up before it was sent is never sent.
// Design: docs/design/redis-store.md#deadlines

// roundTrip runs fn on a goroutine of the store's and returns its result,
// or ctx's error as soon as ctx ends. fn gets ctx, which bounds go-redis'
// wait for a connection.
func roundTrip[T any](ctx context.Context, f *flights, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	f.start(func() {
		v, err := fn(ctx)
		done <- result{v, err}
	})
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // the reply came with the deadline: it stands
			return r.v, r.err
		default:
			return zero, ctx.Err()
		}
	}
}

// flights runs and counts the store's round-trip goroutines so that Close
// can wait for them. Unlike a sync.WaitGroup it may start one while Close
// waits: the store stays usable after Close, which waits only until none is
// left.
type flights struct {
	mu   sync.Mutex
	n    int
	none *sync.Cond // signalled when n drops to 0
}

func (f *flights) start(fn func()) {
	f.mu.Lock()
	if f.none == nil {
		f.none = sync.NewCond(&f.mu)
	}
	f.n++
	f.mu.Unlock()
	go func() {
		defer f.done()
		fn()
	}()
}

func (f *flights) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		f.none.Broadcast()
	}
}

// wait returns once no round trip is running.
func (f *flights) wait() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n > 0 {
		f.none.Wait()
	}
}
