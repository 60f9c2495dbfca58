package redisstore

import (
	"context"
	"sync"
)

// Deadlines. A caller's context must bound every call: when the network to
// Redis stops answering, Claim, Renew and Complete return ctx's error at
// its deadline, so a request fails fast instead of hanging as long as the
// network does. go-redis does not promise that: unless the client was built
// with ContextTimeoutEnabled it ignores ctx once it holds a connection and
// waits for the reply until its own ReadTimeout (5s by default, or never).
// So every round trip of the store runs on a goroutine of its own, and the
// caller waits for the reply or for ctx, whichever comes first. A caller
// that gives up leaves the goroutine to receive the reply, or the client's
// timeout, and put the connection back; Close waits for those goroutines.
//
// A script already on the wire when its caller gives up may still run, as
// with any request whose answer is lost. A script whose caller has given up
// before it was sent never is: it is not started (roundTrip), or it is
// dropped from the pipeline queue (pipeline.go), and go-redis stops waiting
// for a pool connection when the context it was given ends.

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
