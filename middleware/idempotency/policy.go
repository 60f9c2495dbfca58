package idempotency

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// Outcome names the decision taken for a request, as counted in metrics.
type Outcome string

const (
	OutcomeNew        Outcome = "new"         // claimed; the handler runs
	OutcomeReplay     Outcome = "replay"      // the stored response was replayed
	OutcomeConflict   Outcome = "conflict"    // 409: in flight, or outcome unknown
	OutcomeMismatch   Outcome = "mismatch"    // 422: same key, another request
	OutcomeMissingKey Outcome = "missing_key" // 400
	OutcomeInvalidKey Outcome = "invalid_key" // 400
	OutcomeTooLarge   Outcome = "too_large"   // 413
	// OutcomeEncodingRefused: 415, a body in a Content-Encoding the
	// route does not decode, or that does not decode.
	OutcomeEncodingRefused Outcome = "encoding_refused"
	OutcomeStoreError      Outcome = "store_error" // 503, or passed through when failing open
	OutcomeStoreFull       Outcome = "store_full"  // 503: a new key, and the store is full
)

// Stored names what became of an executed request's claim.
type Stored string

const (
	StoredCompleted Stored = "completed" // response stored; retries replay it
	StoredReleased  Stored = "released"  // not processed; a retry runs again
	StoredHeld      Stored = "held"      // ambiguous; held as unknown
	StoredLost      Stored = "lost"      // the claim was lost or the store failed
)

// Event is reported to Config.Observe.
type Event struct {
	Outcome      Outcome
	Scope        Scope
	FencingToken int64
	TakeOver     bool
	// Stored is empty on the decision event and set on the event sent
	// after an executed request finished.
	Stored Stored
	Status int
	Err    error
}

// Attempt describes the claim a wrapped handler runs under. Get it with
// AttemptFrom. A proxy forwards the key (Config.ForwardKey's Key of Scope:
// the canonical key, by default after the tenant) and FencingToken
// upstream, and reports transport failures with NotProcessed or Ambiguous.
type Attempt struct {
	Scope        Scope
	FencingToken int64
	// TakeOver is true when this attempt took over an expired lease or a
	// released record (a retry of an attempt that did not finish).
	TakeOver bool

	mark  atomic.Int32
	lease leaseClock
	// retainAfter is RetainAfter's time in Unix nanoseconds; 0: none.
	retainAfter atomic.Int64
	// expires is when the stored response is forgotten (HeaderKeyExpires);
	// zero until it is stored. Set and read by the request's goroutine.
	expires time.Time
}

const (
	markNone int32 = iota
	markNotProcessed
	markAmbiguous
)

// NotProcessed records that the request certainly did not take effect (the
// upstream could not be reached): the claim is released whatever the status.
func (a *Attempt) NotProcessed() { a.mark.CompareAndSwap(markNone, markNotProcessed) }

// Ambiguous records that the request may or may not have taken effect (sent,
// but no answer came): the claim follows Config.OnAmbiguous.
func (a *Attempt) Ambiguous() { a.mark.Store(markAmbiguous) }

type attemptKey struct{}

// AttemptFrom returns the attempt of a request running under the middleware.
func AttemptFrom(ctx context.Context) (*Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(*Attempt)
	return a, ok
}

// ReleasesKey reports whether a response with this status means "not
// processed, try again" (problem.NotProcessed: 408, 425, 429, 502, 503,
// 504). Such a response is not stored and the claim is released.
func ReleasesKey(status int) bool { return problem.NotProcessed(status) }

// decide returns what becomes of the claim for a finished attempt.
func decide(a *Attempt, status int, onAmbiguous AmbiguousPolicy) Stored {
	switch a.mark.Load() {
	case markAmbiguous:
		if onAmbiguous == AmbiguousHold {
			return StoredHeld
		}
		return StoredReleased
	case markNotProcessed:
		return StoredReleased
	}
	if ReleasesKey(status) {
		return StoredReleased
	}
	return StoredCompleted
}
