package workers

import (
	"errors"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// Backoff computes retry delays: exponential backoff with full jitter for
// failures, a short jittered delay for busy locks and lost ownership. The
// zero value uses the defaults.
type Backoff struct {
	// Base is the cap of the first retry's delay; each failure doubles the
	// cap. Default 1s.
	Base time.Duration `yaml:"base"`
	// Max bounds the cap. Default 10m.
	Max time.Duration `yaml:"max"`
	// Busy is the mean delay after a busy lock or a lost ownership; the
	// delay is drawn from [Busy/2, 3·Busy/2). Default 2s.
	Busy time.Duration `yaml:"busy"`
	// Rand returns a number in [0, n). Default math/rand/v2.Int64N; tests
	// make it deterministic.
	Rand func(n int64) int64 `yaml:"-"`
	// Now is the clock a wait until a time is measured on. Default
	// time.Now; tests fix it.
	Now func() time.Time `yaml:"-"`
}

// Defaults for Backoff.
const (
	DefaultRetryBase = time.Second
	DefaultRetryMax  = 10 * time.Minute
	DefaultRetryBusy = 2 * time.Second
)

func (b Backoff) withDefaults() Backoff {
	if b.Base == 0 {
		b.Base = DefaultRetryBase
	}
	if b.Max == 0 {
		b.Max = DefaultRetryMax
	}
	if b.Busy == 0 {
		b.Busy = DefaultRetryBusy
	}
	if b.Rand == nil {
		b.Rand = mathrand.Int64N
	}
	if b.Now == nil {
		b.Now = time.Now
	}
	return b
}

func (b Backoff) validate() error {
	var errs []error
	if b.Base <= 0 {
		errs = append(errs, errors.New("retry base must be positive"))
	}
	if b.Max < b.Base {
		errs = append(errs, errors.New("retry max must not be below retry base"))
	}
	if b.Busy <= 0 {
		errs = append(errs, errors.New("retry busy delay must be positive"))
	}
	return errors.Join(errs...)
}

// RetryDelay is an asynq.RetryDelayFunc. n is the number of failures the
// task has had before this one, an unavailable dependency included (see
// IsFailure). After a failure the delay is drawn uniformly from
// [0, min(Max, Base·2ⁿ)) (full jitter, so retries of many jobs that failed
// together spread out instead of returning together).
// After a *LockBusyError or an *OwnershipLostError it is drawn from
// [Busy/2, 3·Busy/2) whatever n is. After a *LimitedError it is the
// error's After, which the handler chose (the rate's exact wait). When err wraps a *RetryAfterError the
// delay is at least its After, even above Max: whoever asked knows when
// it will be ready, and an earlier retry would only be refused again.
//
// asynq keeps a retry's time to the second, rounded down, so a wait
// that must not end early is rounded up to end on a whole second
// (job.ProcessAt): a *NotDueError comes back at its NotBefore, whatever n
// is, and a *RetryAfterError's After is waited out in full (a Retry-After
// of 2 seconds was otherwise honoured up to a second early).
func (b Backoff) RetryDelay(n int, err error, _ *asynq.Task) time.Duration {
	b = b.withDefaults()
	now := b.Now()
	if nd, ok := errors.AsType[*NotDueError](err); ok {
		return max(0, job.ProcessAt(nd.NotBefore).Sub(now))
	}
	if limited, ok := errors.AsType[*LimitedError](err); ok {
		return limited.After
	}
	d := b.jittered(n, err)
	if ra, ok := errors.AsType[*RetryAfterError](err); ok {
		d = max(d, job.ProcessAt(now.Add(ra.After)).Sub(now))
	}
	return d
}

func (b Backoff) jittered(n int, err error) time.Duration {
	var (
		busy *LockBusyError
		lost *OwnershipLostError
	)
	if errors.As(err, &busy) || errors.As(err, &lost) {
		return b.Busy/2 + time.Duration(b.Rand(int64(b.Busy)))
	}
	ceiling := b.Base
	for i := 0; i < n && ceiling < b.Max && ceiling <= math.MaxInt64/2; i++ {
		ceiling *= 2
	}
	return time.Duration(b.Rand(int64(min(ceiling, b.Max))))
}

// RetryAfterError asks for the next attempt no sooner than After: a
// receiver answered 429 or 503 with a Retry-After. It is a transient
// error like any other, counted as an attempt unless it wraps an
// *UnavailableError (or is wrapped by one); only its delay differs.
// Whoever builds one bounds After (HTTPDelivery.MaxRetryAfter), since
// RetryDelay honours it as it is.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.After)
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryDelay is Backoff{}.RetryDelay: the default delays.
func RetryDelay(n int, err error, task *asynq.Task) time.Duration {
	return Backoff{}.RetryDelay(n, err, task)
}

// IsFailure is an asynq IsFailure predicate: a busy lock, a flow limit, a
// lost ownership and a task handed over before its job is due
// (*NotDueError) are not failures of the job, so asynq neither counts them
// against the task's retry budget nor in its failure statistics.
//
// An *UnavailableError is a failure to asynq, although the handler does
// not count it toward MaxAttempts: asynq increments the retry count it
// passes to RetryDelay only for failures, and the backoff must keep
// growing while a dependency stays down instead of hammering it every
// Base. The task is enqueued with job.MaxRetry, so asynq's count never
// archives it.
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	var (
		busy    *LockBusyError
		lost    *OwnershipLostError
		limited *LimitedError
	)
	var early *NotDueError
	return !errors.As(err, &busy) && !errors.As(err, &lost) && !errors.As(err, &limited) && !errors.As(err, &early)
}
