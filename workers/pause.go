package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/flowlimit"
)

// Pauses is what a handler asks about pauses (Deps.Pauses). A
// *job.PauseCache is one: it answers Paused from memory.
type Pauses interface {
	// Paused returns the pause that sends back a delivery of task on
	// queue whose flow limits render limits, if one does.
	Paused(task, queue string, limits []job.PauseTarget) (job.Pause, bool)
	// OpenBreaker pauses one key value of a limit for d after failures
	// consecutive failures within window; opened is false when a pause
	// of the value was already in force.
	OpenBreaker(ctx context.Context, limit, key string, failures int, window, d time.Duration) (p job.Pause, opened bool, err error)
}

var _ Pauses = (*job.PauseCache)(nil)

// ReasonPaused is the LimitedError.Reason of a delivery a pause sent back.
const ReasonPaused = "paused"

// DefaultPauseRecheck is Deps.PauseRecheck's default.
const DefaultPauseRecheck = 5 * time.Second

// PausedError is the LimitedError.Err of a delivery a pause sent back.
type PausedError struct{ Pause job.Pause }

func (e *PausedError) Error() string { return e.Pause.Story() }

// PauseObserver receives the events of pauses and breakers. An Observer
// that implements it gets them too; telemetry's WorkerMetrics does.
type PauseObserver interface {
	// PauseBounced reports a delivery of task a pause of kind sent back.
	PauseBounced(task string, kind job.PauseKind)
	// BreakerOpened reports a limit's breaker pausing one of its key
	// values.
	BreakerOpened(limit string)
}

// bouncePaused sends back a delivery whose task, queue or limit key value
// is paused, before its lock or its limits are taken, and without
// counting an attempt: a *LimitedError with ReasonPaused (the ledger gets
// a paused row). It returns nil when nothing pauses the delivery, which
// costs a look at the in-memory Deps.Pauses and no round trip.
func (h *handler[T]) bouncePaused(ctx context.Context, log *slog.Logger, id execID, resource string, rules []flowlimit.Rule) error {
	if h.pauses == nil {
		return nil
	}
	queue, _ := asynq.GetQueueName(ctx)
	var targets []job.PauseTarget
	for _, r := range rules {
		targets = append(targets, job.PauseTarget{Kind: job.PauseLimit, Name: r.Name, Key: flowlimit.ShortValue(r.Value)})
	}
	p, ok := h.pauses.Paused(h.kind, queue, targets)
	if !ok {
		return nil
	}
	after := h.pauseRecheck/2 + time.Duration(h.rand(int64(h.pauseRecheck)))
	if !p.Until.IsZero() {
		if d := time.Until(p.Until); d > 0 && d < after {
			after = d
		}
	}
	h.obs.Attempt(h.kind, ClassLimited)
	if po, ok := h.obs.(PauseObserver); ok {
		po.PauseBounced(h.kind, p.Target.Kind)
	}
	h.warnIfBudgetSpent(ctx, log)
	story := p.Story()
	log.DebugContext(ctx, "paused: rescheduling", "pause", p.Target.String(), "retry_in", after)
	if err := h.store.RecordPaused(ctx, h.attempt(id, resource), story); err != nil {
		log.WarnContext(ctx, "recording the paused delivery failed", "error", err)
	}
	e := &LimitedError{Task: h.kind, Key: id.key, Reason: ReasonPaused, After: after, Err: &PausedError{Pause: p}}
	if p.Target.Kind == job.PauseLimit {
		e.Limit, e.Value = p.Target.Name, p.Target.Key
	}
	return e
}

// breakerCount is one limit's failure count queued with an attempt's
// release.
type breakerCount struct {
	use   job.FlowLimitUse
	value string
	cmd   *redis.Cmd
}

// breakerWrites queues on pipe the breaker counts of the attempt's limits
// that declare pause_after: a failure counts toward opening, a success
// starts the count again. They ride on the release of the lock, so a
// breaker costs no round trip of its own.
func (l *limits) breakerWrites(ctx context.Context, pipe redis.Pipeliner, rules []flowlimit.Rule, out attemptEnd) []breakerCount {
	var counts []breakerCount
	for i, u := range l.uses {
		b := u.Limit.PauseAfter
		if b == nil || i >= len(rules) {
			continue
		}
		v := flowlimit.ShortValue(rules[i].Value)
		if out == attemptFailed {
			counts = append(counts, breakerCount{use: u, value: v,
				cmd: l.limiter.CountFailureIn(ctx, pipe, u.Limit.Name, v, b.Failures, b.Within)})
		} else {
			l.limiter.ResetFailuresIn(ctx, pipe, u.Limit.Name, v)
		}
	}
	return counts
}

// hasBreakers reports whether a limit the handler takes declares
// pause_after.
func (l *limits) hasBreakers() bool {
	for _, u := range l.uses {
		if u.Limit.PauseAfter != nil {
			return true
		}
	}
	return false
}

// openBreakers opens the breaker of each count that reached its limit's
// pause_after, once the release's pipeline has run.
func (h *handler[T]) openBreakers(ctx context.Context, log *slog.Logger, counts []breakerCount) {
	for _, c := range counts {
		n, err := c.cmd.Int()
		if err != nil || n == 0 {
			if err != nil && !errors.Is(err, redis.Nil) {
				log.WarnContext(ctx, "counting the failure toward the limit's breaker failed", "limit", c.use.Limit.Name, "error", err)
			}
			continue
		}
		b := c.use.Limit.PauseAfter
		if h.pauses == nil {
			continue
		}
		fctx, cancel := finishContext(ctx)
		p, opened, err := h.pauses.OpenBreaker(fctx, c.use.Limit.Name, c.value, n, b.Within, b.For)
		cancel()
		switch {
		case err != nil && !opened:
			log.ErrorContext(ctx, "opening the limit's breaker failed", "limit", c.use.Limit.Name, "limit_value", c.value, "error", err)
		case opened:
			if po, ok := h.obs.(PauseObserver); ok {
				po.BreakerOpened(c.use.Limit.Name)
			}
			log.WarnContext(ctx, "breaker opened: limit key value paused", "limit", c.use.Limit.Name, "limit_value", c.value,
				"failures", n, "within", b.Within, "until", p.Until, "pause_reason", p.Reason)
			if err != nil {
				log.ErrorContext(ctx, "the breaker's pause is not in the audit trail", "error", err)
			}
		}
	}
}

// attemptEnd is how an attempt ended, as a breaker counts it.
type attemptEnd int

const (
	attemptNotRun attemptEnd = iota // the business function did not run
	attemptSucceeded
	attemptFailed
)
