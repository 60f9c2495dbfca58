package workers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/flowlimit"
	"github.com/idemgate/idemgate/workers/lock"
)

// ClassLimited: a flow limit sent the delivery back before it started;
// rescheduled after the limit's wait, not counted as an attempt.
const ClassLimited = "limited"

// LimitedError is returned when a flow limit (job.Spec.Limits) or a
// pause (Deps.Pauses) refused a delivery before its attempt started. It
// is not a failure: the attempt is not counted, the job stays queued, and
// the task comes back after After: the exact wait the rate gives, or a
// jittered delay when the limit's slots are all held or the work is
// paused.
type LimitedError struct {
	Task, Key string
	// Limit and Value name the budget that refused: the limit and its key
	// value. Both are "" for a pause of a task or a queue.
	Limit, Value string
	// Reason is flowlimit.ReasonConcurrency, flowlimit.ReasonRate or ReasonPaused.
	Reason string
	// After is when the task is tried again.
	After time.Duration
	Err   error // the *flowlimit.RefusedError, or the *PausedError
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("workers: %s %s: %v: retry in %s", e.Task, e.Key, e.Err, e.After.Round(time.Millisecond))
}
func (e *LimitedError) Unwrap() error { return e.Err }

// DefaultLimitWait is Deps.LimitWait's default: a refusal whose wait ends
// within a second is waited out in place.
const DefaultLimitWait = time.Second

// limitPoll is the mean pause between two looks at a limit whose slots
// are all held, while the worker waits in place.
const limitPoll = 100 * time.Millisecond

// wait waits d, or until freed receives (a nil freed never does), or
// until ctx ends. It reports whether freed received, and whether ctx is
// still live.
func wait(ctx context.Context, freed <-chan struct{}, d time.Duration) (signalled, live bool) {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return false, true
	case <-freed:
		return true, true
	case <-ctx.Done():
		return false, false
	}
}

// behind returns a refusal of the first slot budget of rules for which an
// older take of this process is in line, or nil when none is.
func (l *limits) behind(rules []flowlimit.Rule, watches map[string]*flowlimit.Watch) *flowlimit.RefusedError {
	for _, r := range rules {
		if w := watches[r.Name]; w != nil && !w.First() {
			return &flowlimit.RefusedError{Name: r.Name, Value: flowlimit.ShortValue(r.Value), Reason: flowlimit.ReasonConcurrency}
		}
	}
	return nil
}

// watch puts a take in line for every budget of rules with slots, by
// limit name.
func (l *limits) watch(rules []flowlimit.Rule) map[string]*flowlimit.Watch {
	var out map[string]*flowlimit.Watch
	for _, r := range rules {
		if r.Concurrency > 0 {
			if out == nil {
				out = make(map[string]*flowlimit.Watch, len(rules))
			}
			out[r.Name] = l.limiter.Watch(r.Name, r.Value)
		}
	}
	return out
}

func stopWatches(ws map[string]*flowlimit.Watch) {
	for _, w := range ws {
		w.Stop()
	}
}

// LimitReasons lists the reasons LimitObserver.LimitWaited reports.
func LimitReasons() []string { return []string{flowlimit.ReasonConcurrency, flowlimit.ReasonRate} }

// LimitObserver receives the events of flow limits. An Observer that
// implements it gets them too; telemetry's WorkerMetrics does.
type LimitObserver interface {
	// LimitWaited reports a delivery a limit made wait: the limit's name,
	// flowlimit.ReasonConcurrency or flowlimit.ReasonRate (of the last refusal),
	// and how long it waited: in place until admitted, or in place plus
	// the delay it was sent back to the queue with.
	LimitWaited(limit, reason string, wait time.Duration)
	// LimitHeld reports this process taking (+1) or giving back (-1) a
	// slot of the limit.
	LimitHeld(limit string, delta int)
}

// WithLimits makes every attempt of the handler take uses first, all or
// none (Handlers.Mux passes a job's declared limits).
func WithLimits(uses ...job.FlowLimitUse) Option {
	return func(o *options) { o.limits = append(o.limits, uses...) }
}

// limits is a handler's flow limits: the limits its job uses, and the
// slots its running attempts hold, by resource, so the resource lock's
// renewal renews them too.
type limits struct {
	uses    []job.FlowLimitUse
	limiter *flowlimit.Limiter
	// lease is a slot's lease: the lock's TTL, renewed with the lock.
	lease time.Duration
	// busy is the mean delay after full slots; wait bounds a wait in
	// place, poll is the mean pause between two looks at full slots.
	busy, wait, poll time.Duration
	rand             func(n int64) int64
	obs              LimitObserver
	log              *slog.Logger
	held             sync.Map // resource → *flowlimit.Hold
}

// newLimits returns nil for a job without limits. A Redis client the
// limiter cannot use is a wiring mistake, found at start-up.
func newLimits(deps Deps, kind string, uses []job.FlowLimitUse, lease time.Duration, obs Observer, log *slog.Logger) *limits {
	if len(uses) == 0 {
		return nil
	}
	client, ok := deps.Redis.(flowlimit.Client)
	if !ok {
		panic(fmt.Sprintf("workers: Handle %s: Deps.Redis (%T) cannot run pipelines, which limits need", kind, deps.Redis))
	}
	l := &limits{
		uses:    uses,
		limiter: flowlimit.New(client, flowlimit.Options{Prefix: deps.Lock.Prefix}),
		lease:   lease,
		busy:    deps.LimitBusy,
		rand:    mathrand.Int64N,
		log:     log,
	}
	if l.busy <= 0 {
		l.busy = DefaultRetryBusy
	}
	switch {
	case deps.LimitWait == 0:
		l.wait = DefaultLimitWait
	case deps.LimitWait > 0:
		l.wait = deps.LimitWait
	}
	l.poll = min(l.busy, limitPoll)
	l.obs, _ = obs.(LimitObserver)
	return l
}

// rules renders the key value of each limit from the task's tenant and
// payload.
func (l *limits) rules(tenant string, raw []byte) ([]flowlimit.Rule, error) {
	var data any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&data); err != nil {
		return nil, fmt.Errorf("limits: decode payload: %w", err)
	}
	rules := make([]flowlimit.Rule, len(l.uses))
	for i, u := range l.uses {
		v, err := u.Value(tenant, data)
		if err != nil {
			return nil, err
		}
		d := u.Limit
		rules[i] = flowlimit.Rule{Name: d.Name, Value: v, Concurrency: d.Concurrency, Rate: d.Rate, Period: d.Period, Burst: d.Burst}
	}
	return rules, nil
}

// takeLimits takes the job's limits for one attempt, holding its resource
// lock and before the attempt is counted. It returns nil for a job
// without limits; a *LimitedError when one refused (the ledger gets a
// limited row); any other error when Redis could not be asked, which is a
// transient error before the attempt: a job never runs unlimited because
// its limits could not be checked.
//
// A refusal whose wait ends within the limit's in-place bound (l.wait,
// Deps.LimitWait) is waited out here, holding the worker and the lock,
// and the take tried again: asynq brings a rescheduled task back only
// when its forwarder next looks (every 5s by default), so sending back a
// task that may start in 50ms would leave the partner's budget unused.
// Only a longer wait sends the task back. lctx is the lease's context: a
// lost lock ends the wait.
func (h *handler[T]) takeLimits(ctx, lctx context.Context, log *slog.Logger, id execID, resource string, rules []flowlimit.Rule) (*flowlimit.Hold, error) {
	l := h.limits
	if l == nil {
		return nil, nil
	}
	var err error
	holder := flowlimit.Holder(id.job)
	start := time.Now()
	deadline := start.Add(l.wait)
	var (
		hold    *flowlimit.Hold
		refused *flowlimit.RefusedError // the last refusal
	)
	// In line for each slot budget before the first take, so that no
	// release in this process is missed and its waiters take slots in
	// the order they came.
	watches := l.watch(rules)
	defer stopWatches(watches)
	signalled := false
	for {
		if behind := l.behind(rules, watches); behind != nil && !signalled {
			// An older take of this process waits for the same slots:
			// wait behind it rather than take the next free slot first.
			err = behind
		} else {
			hold, err = l.limiter.Take(lctx, holder, l.lease, rules)
		}
		r, ok := errors.AsType[*flowlimit.RefusedError](err)
		if !ok {
			break
		}
		refused = r
		pause := refused.RetryAfter
		var freed <-chan struct{}
		if w := watches[refused.Name]; w != nil && refused.Reason == flowlimit.ReasonConcurrency {
			// A slot frees when a holder ends. One of this process signals
			// the oldest waiter at once; the first in line also looks at
			// Redis now and then for a slot another process freed.
			freed = w.C()
			pause = time.Until(deadline)
			if w.First() {
				pause = min(pause, l.poll/2+time.Duration(l.rand(int64(l.poll))))
			}
		}
		if time.Now().Add(pause).After(deadline) && freed == nil {
			break
		}
		var live bool
		signalled, live = wait(lctx, freed, pause)
		if !live || (freed != nil && !signalled && !time.Now().Before(deadline)) {
			break
		}
	}
	switch {
	case err == nil:
		if waited := time.Since(start); refused != nil && l.obs != nil {
			l.obs.LimitWaited(refused.Name, refused.Reason, waited)
		}
	case errors.As(err, new(*flowlimit.RefusedError)) && lctx.Err() == nil:
		after := refused.RetryAfter
		if refused.Reason == flowlimit.ReasonConcurrency {
			after = l.busy/2 + time.Duration(l.rand(int64(l.busy)))
		}
		h.obs.Attempt(h.kind, ClassLimited)
		if l.obs != nil {
			l.obs.LimitWaited(refused.Name, refused.Reason, time.Since(start)+after)
		}
		h.warnIfBudgetSpent(ctx, log)
		log.DebugContext(ctx, "limited: rescheduling", "limit", refused.Name, "limit_value", refused.Value,
			"limit_reason", refused.Reason, "retry_in", after)
		if lerr := h.store.RecordLimited(ctx, h.attempt(id, resource), refused.Error()); lerr != nil {
			log.WarnContext(ctx, "recording the limited attempt failed", "error", lerr)
		}
		return nil, &LimitedError{Task: h.kind, Key: id.key, Limit: refused.Name, Value: refused.Value,
			Reason: refused.Reason, After: after, Err: refused}
	default:
		if lctx.Err() != nil {
			err = errors.Join(err, context.Cause(lctx))
		}
		return nil, h.transientBeforeAttempt(ctx, log, fmt.Errorf("take limits: %w", err))
	}
	if hold.Slots() {
		l.held.Store(resource, hold)
		l.countHeld(+1)
	}
	return hold, nil
}

// releaseWithLimits releases the job's lock and gives the attempt's
// slots back, however it ended, in one round trip: the slots' ZREMs ride
// on the pipeline that deletes the lock (lock.Lease.ReleaseWith), so a
// limit costs an attempt the take's round trip and nothing more. The
// breakers' counts of an attempt that ran (end) ride on it too. A
// release that fails frees the lock at its TTL and the slots at their
// lease's end.
func (h *handler[T]) releaseWithLimits(ctx context.Context, log *slog.Logger, lease *lock.Lease, resource string, hold *flowlimit.Hold, rules []flowlimit.Rule, end attemptEnd) {
	l := h.limits
	slots := l != nil && hold != nil && hold.Slots()
	breakers := l != nil && end != attemptNotRun && l.hasBreakers()
	if !slots && !breakers {
		h.release(ctx, log, lease)
		return
	}
	if slots {
		l.held.Delete(resource)
		l.countHeld(-1)
	}
	fctx, cancel := finishContext(ctx)
	defer cancel()
	var counts []breakerCount
	sent, err := lease.ReleaseWith(fctx, func(pipe redis.Pipeliner) {
		if slots {
			hold.ReleaseIn(fctx, pipe)
		}
		if breakers {
			counts = l.breakerWrites(fctx, pipe, rules, end)
		}
	})
	defer h.openBreakers(ctx, log, counts)
	if err != nil {
		log.WarnContext(ctx, "releasing the lock and the limits' slots failed: they free at their TTL and lease's end",
			"lock_event", "release_failed", "error", err)
	} else {
		log.DebugContext(ctx, "lock released", "lock_event", "released")
		if slots {
			hold.Freed()
		}
	}
	if !sent && slots {
		// A client that cannot pipeline: the slots go on their own.
		if err := hold.Release(fctx); err != nil {
			log.WarnContext(ctx, "giving back the limits' slots failed: they free at their lease's end", "error", err)
		}
	}
}

// abandonLimits forgets the attempt's slots without giving them back, as a
// worker that died would: they free at their lease's end.
func (h *handler[T]) abandonLimits(resource string, hold *flowlimit.Hold) {
	if h.limits == nil || hold == nil || !hold.Slots() {
		return
	}
	h.limits.held.Delete(resource)
	h.limits.countHeld(-1)
}

func (l *limits) countHeld(delta int) {
	if l.obs == nil {
		return
	}
	for _, u := range l.uses {
		if u.Limit.Concurrency > 0 {
			l.obs.LimitHeld(u.Limit.Name, delta)
		}
	}
}

// renewed runs after each renewal of a resource lock: the slots the
// attempt holding it took get the same new lease. A renewal that finds a
// slot gone (its lease ran out while the process stalled) is logged; the
// attempt goes on, since a limit paces calls and never decides an effect.
func (l *limits) renewed(resource string) {
	v, ok := l.held.Load(resource)
	if !ok {
		return
	}
	hold := v.(*flowlimit.Hold)
	ctx, cancel := context.WithTimeout(context.Background(), l.lease/3)
	defer cancel()
	n, err := hold.Renew(ctx, l.lease)
	switch {
	case err != nil:
		l.log.Warn("renewing the limits' slots failed", "resource", resource, "error", err)
	case n < l.slotCount():
		l.log.Warn("a limit slot's lease ran out before its renewal", "resource", resource, "renewed", n)
	}
}

func (l *limits) slotCount() int {
	n := 0
	for _, u := range l.uses {
		if u.Limit.Concurrency > 0 {
			n++
		}
	}
	return n
}
