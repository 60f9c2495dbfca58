package idempotency

import (
	"math"
	"time"
)

// RetainAfter asks that the response this attempt stores be kept for the
// configured retention after t instead of after now. A handler whose
// answer stays meaningful until a later time calls it before writing its
// response: a job scheduled to run in a week must replay its 202 (the
// same job id) to a retry during that week and for the retention after,
// not run again as a new request once the usual retention has passed. A
// t already past changes nothing; of several calls the latest t counts.
// The stores count the retention from their own clocks, so the extension
// is t's distance from this process's now.
func (a *Attempt) RetainAfter(t time.Time) {
	// A past t is dropped before any arithmetic, since t.UnixNano wraps
	// before 1678 (1600 became 2184: a record kept for 160 years). A t
	// after 2262, where it wraps too, is held at the last time it names.
	if !t.After(time.Now()) {
		return
	}
	if last := time.Unix(0, math.MaxInt64); t.After(last) {
		t = last
	}
	n := t.UnixNano()
	for {
		old := a.retainAfter.Load()
		if n <= old || a.retainAfter.CompareAndSwap(old, n) {
			return
		}
	}
}

// retention is how long the attempt's completed response is kept: base,
// the configured retention, plus the time until RetainAfter's t.
func (a *Attempt) retention(base time.Duration) time.Duration {
	n := a.retainAfter.Load()
	if n == 0 {
		return base
	}
	if extra := time.Until(time.Unix(0, n)); extra > 0 {
		return base + extra
	}
	return base
}

// expiresAt is when a response stored at start for the retention base is
// forgotten: base after start, or after RetainAfter's t when that is
// later.
func (a *Attempt) expiresAt(start time.Time, base time.Duration) time.Time {
	if n := a.retainAfter.Load(); n != 0 {
		if t := time.Unix(0, n); t.After(start) {
			return t.Add(base)
		}
	}
	return start.Add(base)
}
