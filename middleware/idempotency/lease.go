package idempotency

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrLeaseExpired means the attempt's lease has run out by the gateway's
// own clock: the store could not renew it in time, or the process was
// paused. Another request may already have taken the key over, so the
// attempt must not go upstream any more. Attempt.Check returns it.
var ErrLeaseExpired = errors.New("idempotency: lease expired")

// leaseClock is an attempt's lease as this process sees it: a deadline on
// the monotonic clock, set from the moment the claim (or the last renewal)
// was sent, so it never ends later than the lease in the store.
type leaseClock struct {
	start time.Time    // carries a monotonic reading
	until atomic.Int64 // nanoseconds after start
}

func (c *leaseClock) begin(sent time.Time, lease time.Duration) {
	c.start = sent
	c.until.Store(int64(lease))
}

// extend moves the deadline to sent+lease after a renewal sent at sent.
func (c *leaseClock) extend(sent time.Time, lease time.Duration) {
	until := int64(sent.Sub(c.start) + lease)
	for {
		old := c.until.Load()
		if until <= old || c.until.CompareAndSwap(old, until) {
			return
		}
	}
}

// expired reports whether the deadline has passed. A clock never begun
// (an Attempt made outside the middleware) never expires.
func (c *leaseClock) expired() bool {
	return !c.start.IsZero() && time.Since(c.start) >= time.Duration(c.until.Load())
}

// Check returns ErrLeaseExpired when the attempt's lease has run out by
// this process's monotonic clock, and nil while it holds. A proxy calls it
// right before sending the request upstream: a gateway paused past its
// lease (a stopped process, a long pause) then gives up instead of sending
// a stale attempt beside the one that took the key over.
func (a *Attempt) Check() error {
	if a.lease.expired() {
		return ErrLeaseExpired
	}
	return nil
}

// renewer keeps the lease alive every Lease/3 until stop; a failed
// renewal is retried sooner, so one slow store call does not cost the
// claim. When the claim is lost to someone else the handler's context is
// cancelled. It runs on a timer, not a goroutine of its own: most requests
// end long before the first renewal is due, and then none ever runs.
type renewer struct {
	m       *Middleware
	ctx     context.Context
	req     ClaimRequest
	attempt *Attempt
	cancel  context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	running sync.WaitGroup // a renewal in progress
}

// startRenewing sets rn going, a renewer not yet used.
func (m *Middleware) startRenewing(rn *renewer, ctx context.Context, req ClaimRequest, a *Attempt, cancel context.CancelCauseFunc) {
	rn.m, rn.ctx, rn.req, rn.attempt, rn.cancel = m, ctx, req, a, cancel
	rn.mu.Lock()
	rn.timer = time.AfterFunc(m.cfg.Lease/3, rn.renew)
	rn.mu.Unlock()
}

// stop ends the renewals and waits for one in progress; it may be called
// more than once.
func (rn *renewer) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.timer.Stop()
	rn.mu.Unlock()
	rn.running.Wait()
}

func (rn *renewer) renew() {
	rn.mu.Lock()
	if rn.stopped {
		rn.mu.Unlock()
		return
	}
	rn.running.Add(1)
	rn.mu.Unlock()
	defer rn.running.Done()

	m := rn.m
	period := m.cfg.Lease / 3
	sent := time.Now()
	ctx, cancel := m.commitContext(rn.ctx)
	err := m.store.Renew(ctx, rn.req.Scope, rn.req.Owner, m.cfg.Lease)
	cancel()
	if err == nil {
		rn.attempt.lease.extend(sent, m.cfg.Lease)
	}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	switch {
	case errors.Is(err, ErrNotOwner):
		rn.cancel(ErrNotOwner)
	case rn.stopped:
	case err != nil:
		m.cfg.Logger.WarnContext(rn.ctx, "idempotency lease renewal failed", "route", rn.req.Scope.Route, "idempotency_key", rn.req.Scope.Key, "err", err)
		rn.timer.Reset(min(period, 100*time.Millisecond))
	default:
		rn.timer.Reset(period)
	}
}
