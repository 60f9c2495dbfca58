package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease is a held lock. Its goroutine renews the key every TTL/3 until the
// lease is released, abandoned or lost, or the context given to Acquire
// ends. Its methods are safe for concurrent use.
type Lease struct {
	locker   *Locker
	resource string
	key      string
	token    string

	ctx    context.Context
	cancel context.CancelCauseFunc
	// expiry cancels ctx one TTL after the start of the last successful
	// renewal, so a lease whose renewals stall (a slow Redis, a blocked
	// goroutine) stops its work no later than Redis lets the key go.
	expiry  *time.Timer
	stopped chan struct{}
}

func newLease(parent context.Context, l *Locker, resource, key, token string, start time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	ls := &Lease{
		locker:   l,
		resource: resource,
		key:      key,
		token:    token,
		ctx:      ctx,
		cancel:   cancel,
		stopped:  make(chan struct{}),
	}
	ttl := l.opts.TTL
	ls.expiry = time.AfterFunc(time.Until(start.Add(ttl)), func() {
		ls.lose(fmt.Errorf("%w: %s not renewed within %s", ErrLost, key, ttl))
	})
	go ls.renewLoop()
	return ls
}

// Resource is the resource the lease locks.
func (l *Lease) Resource() string { return l.resource }

// Key is the Redis key of the lock.
func (l *Lease) Key() string { return l.key }

// Context is done as soon as the lease is no longer known to be ours: lost
// (cause wraps ErrLost), released (ErrReleased), abandoned (ErrAbandoned),
// or the context given to Acquire ended. Work done under the lease uses it.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held and context.Cause(Context()) after.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Release stops renewing, waits for the renewal goroutine to return and
// deletes the key if it is still ours. For a lease already lost, or already
// released, it deletes nothing and returns nil: the key may belong to the
// next owner by now. It reports only a failure to reach Redis, or the end
// of ctx; a release still queued when ctx ends is sent all the same, so
// the resource is free at once rather than at the TTL.
func (l *Lease) Release(ctx context.Context) error {
	l.stop(ErrReleased)
	if err := l.locker.do(l.releaseCall(ctx, nil)).cmd.Err(); err != nil {
		return fmt.Errorf("lock: release %s: %w", l.key, err)
	}
	return nil
}

// releaseCall is the release script, sent even if ctx ends before it goes
// out (see pipeline.go), with more's writes after it.
func (l *Lease) releaseCall(ctx context.Context, more func(redis.Pipeliner)) *call {
	return &call{ctx: ctx, keep: true, script: l.locker.release, keys: []string{l.key}, args: []any{l.token}, more: more}
}

// ReleaseWith is Release with more writes in the same round trip: more
// queues them on the pipeline that deletes the lock, right after the
// release (the worker gives a job's flow-limit slots back this way). Like
// the release, they are sent even if ctx ends first. A client that cannot pipeline
// releases the lock alone, and more is not run: ReleaseWith reports
// false, and the caller sends its writes itself.
func (l *Lease) ReleaseWith(ctx context.Context, more func(redis.Pipeliner)) (bool, error) {
	if l.locker.pipe == nil {
		return false, l.Release(ctx)
	}
	l.stop(ErrReleased)
	c := l.locker.do(l.releaseCall(ctx, more))
	if err := c.cmd.Err(); err != nil {
		return true, fmt.Errorf("lock: release %s: %w", l.key, err)
	}
	if c.moreErr != nil {
		return true, fmt.Errorf("lock: release %s: with it: %w", l.key, c.moreErr)
	}
	return true, nil
}

// Abandon stops renewing and waits for the renewal goroutine to return, but
// leaves the key in Redis to expire after its TTL, as a process that died
// holding the lock would. Use it when the outcome of the work is uncertain
// and the lock must keep others out until it expires.
func (l *Lease) Abandon() { l.stop(ErrAbandoned) }

func (l *Lease) stop(cause error) {
	l.cancel(cause)
	<-l.stopped
	l.expiry.Stop()
}

// lose cancels the lease with cause and reports it, once, unless the lease
// had already ended for another reason.
func (l *Lease) lose(cause error) {
	l.cancel(cause)
	if context.Cause(l.ctx) == cause && l.locker.opts.OnLost != nil {
		l.locker.opts.OnLost(l.resource, cause)
	}
}

func (l *Lease) renewLoop() {
	defer close(l.stopped)
	opts := l.locker.opts
	t := time.NewTicker(opts.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		if opts.BeforeRenew != nil {
			opts.BeforeRenew(l.ctx, l.resource)
		}
		if l.ctx.Err() != nil {
			return
		}
		start := time.Now()
		n, err := l.locker.do(&call{ctx: l.ctx, script: l.locker.renew, keys: []string{l.key}, args: []any{l.token, opts.TTL.Milliseconds()}}).cmd.Int64()
		switch {
		case l.ctx.Err() != nil:
			// Released, abandoned or expired while the call was in flight.
			return
		case err != nil:
			l.lose(fmt.Errorf("%w: renew %s: %w", ErrLost, l.key, err))
			return
		case n != 1:
			l.lose(fmt.Errorf("%w: %s is missing or owned by another", ErrLost, l.key))
			return
		}
		l.expiry.Reset(time.Until(start.Add(opts.TTL)))
		if opts.OnRenewed != nil {
			opts.OnRenewed(l.resource)
		}
	}
}
