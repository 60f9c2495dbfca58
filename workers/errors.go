package workers

import (
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/job"
)

// PermanentError marks an error retrying cannot fix: the job is marked
// failed and its task archived (the dead-letter queue).
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent. A business function returns it for a
// job that can never succeed (a declined card, an order that does not
// exist). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or an error it wraps, is permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// UnavailableError marks an error that says nothing about the job: a
// dependency it needs (a partner API, a receiver) is down or overloaded, so
// the attempt could not even be judged. The job is retried with the usual
// exponential backoff and full jitter, its error is recorded, but the
// attempt is given back: it does not count toward MaxAttempts, and
// unavailability alone never dead-letters a job, however long it lasts.
type UnavailableError struct {
	Err error
}

func (e *UnavailableError) Error() string { return "unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable marks err as the unavailability of a dependency. A business
// function returns it when the call it depends on could not be made or
// was not processed: a connection refused, a timeout, a 503, a 429, an
// open circuit breaker. It is for "not now", never for "not this job": an
// error that retrying this job cannot fix is Permanent, and one that may
// be a fault of the job (a 500 from the job's own receiver) stays a plain
// error, so that it eventually dead-letters. Permanent wins over
// Unavailable when an error is both. Unavailable(nil) is nil.
//
// An effect whose call went unanswered may have happened: the retry must
// send the same idempotency key, as it must after any transient error.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err}
}

// IsUnavailable reports whether err, or an error it wraps, marks a
// dependency as unavailable.
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// LockBusyError is returned when another worker holds the job's resource.
// It is not a failure: the task is rescheduled after a short jittered
// delay and the attempt is not counted.
type LockBusyError struct {
	Task     string
	Key      string
	Resource string
	Err      error // wraps lock.ErrBusy
}

func (e *LockBusyError) Error() string {
	return fmt.Sprintf("workers: %s %s: resource %s is locked by another worker", e.Task, e.Key, e.Resource)
}
func (e *LockBusyError) Unwrap() error { return e.Err }

// OwnershipLostError is returned when an attempt lost its job to a newer
// owner: its lease was lost while it ran, or a fence (in the business
// transaction or in the execution state) refused its token. The attempt
// stopped without deciding the job's fate; the newer owner decides it, so
// this is retried after a short delay and never dead-letters the job.
type OwnershipLostError struct {
	Task     string
	Key      string
	Resource string
	Token    int64
	Err      error // a *fence.StaleTokenError, or the lease's loss
}

func (e *OwnershipLostError) Error() string {
	return fmt.Sprintf("workers: %s %s: lost resource %s (fencing token %d): %v", e.Task, e.Key, e.Resource, e.Token, e.Err)
}
func (e *OwnershipLostError) Unwrap() error { return e.Err }

// ConflictError is returned, permanently, for a job whose business key
// already belongs to a job with another payload: it has succeeded (the
// same order, another amount) or is running. The first payload decides a
// key's effect; reporting its result for different data would be a lie.
type ConflictError struct {
	Task string
	Key  string
	// Status and ResultRef are the key's: succeeded with its result, or
	// processing.
	Status    job.Status
	ResultRef string
}

func (e *ConflictError) Error() string {
	if e.Status == job.StatusSucceeded {
		return fmt.Sprintf("conflict: business key %s already succeeded with a different payload (result %s)", e.Key, e.ResultRef)
	}
	return fmt.Sprintf("conflict: business key %s is being processed with a different payload", e.Key)
}
