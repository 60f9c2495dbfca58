package examples

import (
	"errors"
	"sync"
	"time"
)

// BreakerConfig shapes a circuit breaker. A partner that is down is asked
// again only once per CoolDown instead of once per retry of every job,
// which spares it a retry storm when it comes back.
type BreakerConfig struct {
	// Failures is how many failures in a row (5xx, 408, 425, 429,
	// timeouts, connection errors) open the circuit. Default 5.
	Failures int
	// CoolDown is how long an open circuit refuses calls before it lets one
	// probe through (half-open): the probe's success closes the circuit, its
	// failure opens it for another CoolDown. Default 30s.
	CoolDown time.Duration
}

// ErrCircuitOpen is what a partner call returns, without calling, while the
// endpoint's circuit is open, wrapped with workers.Unavailable: the job is
// retried with backoff, without counting the attempt, and the call is made
// once the circuit lets calls through again.
var ErrCircuitOpen = errors.New("examples: partner circuit open")

// callOutcome is what a call says about the partner's health.
type callOutcome int

const (
	callSucceeded callOutcome = iota // the partner answered (a refusal included)
	callFailed                       // 5xx, 408/425/429, timeout, connection error
	callIgnored                      // our side gave up; no verdict on the partner
)

// breaker is a consecutive-failures circuit breaker: closed, it lets every
// call through and counts failures in a row; Failures of them open it; open,
// it refuses calls until CoolDown has passed, then lets one probe through
// (half-open) whose outcome closes or reopens it.
type breaker struct {
	failures int
	coolDown time.Duration
	now      func() time.Time

	mu       sync.Mutex
	state    breakerState
	inARow   int
	openedAt time.Time
}

type breakerState int

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen // one probe in flight
)

func newBreaker(cfg BreakerConfig, now func() time.Time) *breaker {
	return &breaker{failures: cfg.Failures, coolDown: cfg.CoolDown, now: now}
}

// allow returns ErrCircuitOpen while the circuit refuses calls, and
// otherwise a function the caller must call once with the call's outcome.
func (b *breaker) allow() (func(callOutcome), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerHalfOpen:
		return nil, ErrCircuitOpen
	case breakerOpen:
		if b.now().Sub(b.openedAt) < b.coolDown {
			return nil, ErrCircuitOpen
		}
		b.state = breakerHalfOpen
		return b.probeDone, nil
	}
	return b.callDone, nil
}

func (b *breaker) callDone(o callOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != breakerClosed {
		// Another call opened the circuit while this one was in flight.
		return
	}
	switch o {
	case callSucceeded:
		b.inARow = 0
	case callFailed:
		b.inARow++
		if b.inARow >= b.failures {
			b.state, b.openedAt = breakerOpen, b.now()
		}
	}
}

func (b *breaker) probeDone(o callOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch o {
	case callSucceeded:
		b.state, b.inARow = breakerClosed, 0
	case callFailed:
		b.state, b.openedAt = breakerOpen, b.now()
	default:
		// No verdict: the next call may probe at once.
		b.state = breakerOpen
	}
}
