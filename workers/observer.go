package workers

import "github.com/idemgate/idemgate/job"

// Lock acquisition results, as reported to Observer.LockAcquire.
const (
	LockAcquired = "acquired"
	LockBusy     = "busy"
	LockError    = "error"
)

// Error classes of a failed attempt, as reported to Observer.Attempt.
const (
	// ClassTransient: retried with exponential backoff; counts toward
	// MaxAttempts.
	ClassTransient = "transient"
	// ClassPermanent: the job is marked failed and archived.
	ClassPermanent = "permanent"
	// ClassUnavailable: a dependency was unavailable (Unavailable);
	// retried with exponential backoff, not counted toward MaxAttempts.
	ClassUnavailable = "unavailable"
	// ClassLockBusy: another worker holds the resource; rescheduled soon,
	// not counted as an attempt.
	ClassLockBusy = "lock_busy"
	// ClassStaleToken: the attempt lost the resource to a newer owner (its
	// lease was lost or a fence refused its token); not a failure of the job.
	ClassStaleToken = "stale_token"
	// ClassCancelled: the job was cancelled while the attempt ran, and the
	// attempt did not succeed; the job ends cancelled.
	ClassCancelled = "cancelled"
	// ClassJobGone: the task's job record is gone (deleted by the jobs
	// retention or an operator); the task is acked without an attempt.
	ClassJobGone = "job_gone"
	// ClassSuperseded: the task carries a version of a debounced job that
	// a later submit replaced; it is acked without an attempt, and the
	// later submit's task runs the job.
	ClassSuperseded = "superseded"
)

// LockResults lists the results Observer.LockAcquire reports.
func LockResults() []string { return []string{LockAcquired, LockBusy, LockError} }

// ErrorClasses lists the error classes Observer.Attempt reports.
func ErrorClasses() []string {
	return []string{ClassTransient, ClassPermanent, ClassUnavailable, ClassLockBusy, ClassStaleToken, ClassCancelled, ClassLimited, ClassJobGone, ClassSuperseded}
}

// FinishedStatuses lists the statuses Observer.JobFinished reports: the
// final ones (job.StatusSucceeded, job.StatusFailed).
func FinishedStatuses() []job.Status {
	var out []job.Status
	for _, s := range job.Statuses() {
		if s.Final() {
			out = append(out, s)
		}
	}
	return out
}

// Observer receives the events the worker framework counts. Metrics
// implement it; every method must be cheap and safe for concurrent use.
type Observer interface {
	// LockAcquire reports one attempt to take a resource lock: LockAcquired,
	// LockBusy or LockError.
	LockAcquire(result string)
	// LockRenewed reports a successful lease renewal.
	LockRenewed()
	// LockLost reports a lease lost while its job was running.
	LockLost()
	// FencingRejected reports a write refused for a stale fencing token.
	FencingRejected()
	// Attempt reports an attempt that did not succeed, by error class
	// (ClassTransient, ClassPermanent, ClassUnavailable, ClassLockBusy,
	// ClassStaleToken, ClassCancelled, ClassLimited, ClassJobGone,
	// ClassSuperseded).
	Attempt(task, errorClass string)
	// JobReplay reports a delivery of a job that had already succeeded,
	// acked without running it again.
	JobReplay(task string)
	// RecordRetried reports one more try at recording a succeeded
	// effect (its execution state or its job status) after the store
	// failed, instead of running the effect again.
	RecordRetried(task string)
	// JobFinished reports a job reaching a final status:
	// job.StatusSucceeded, job.StatusFailed or job.StatusCancelled.
	JobFinished(task string, status job.Status)
}

// NopObserver ignores every event. It is the default Observer.
type NopObserver struct{}

var _ Observer = NopObserver{}

func (NopObserver) LockAcquire(string)             {}
func (NopObserver) LockRenewed()                   {}
func (NopObserver) LockLost()                      {}
func (NopObserver) FencingRejected()               {}
func (NopObserver) Attempt(string, string)         {}
func (NopObserver) JobReplay(string)               {}
func (NopObserver) RecordRetried(string)           {}
func (NopObserver) JobFinished(string, job.Status) {}
