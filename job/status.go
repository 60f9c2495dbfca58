package job

// Status is where a job stands. These strings are the job document's
// status (openapi.yaml's JobStatus), the jobs table's status column and
// the status the worker framework reports; this is their one definition,
// and every other package names them as job.StatusQueued and so on.
type Status string

const (
	// StatusScheduled: accepted with a delay (Idemgate-Delay,
	// Idemgate-Not-Before or the job's delay), not due yet. The job
	// document shows it queued once not_before has passed.
	StatusScheduled Status = "scheduled"
	// StatusQueued: accepted by the gateway, waiting for a worker.
	StatusQueued Status = "queued"
	// StatusProcessing: an attempt owns the job.
	StatusProcessing Status = "processing"
	// StatusRetrying: the last attempt failed transiently; the next is due.
	StatusRetrying Status = "retrying"
	// StatusCancelling: a cancel arrived while an attempt was in flight;
	// no further attempt starts, and the attempt's end decides between
	// StatusSucceeded and StatusCancelled.
	StatusCancelling Status = "cancelling"
	// StatusSucceeded: the effect happened. Final.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: a permanent error, or the attempts ran out. Final, until
	// the job is replayed from the dead-letter queue.
	StatusFailed Status = "failed"
	// StatusCancelled: cancelled before its effect happened, or with the
	// effect unknown (an HTTP delivery that never answered). Final.
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status, in the order a job moves through them.
func Statuses() []Status {
	return []Status{StatusScheduled, StatusQueued, StatusProcessing, StatusRetrying, StatusCancelling,
		StatusSucceeded, StatusFailed, StatusCancelled}
}

// Final reports whether s ends a job: StatusSucceeded, StatusFailed or
// StatusCancelled.
func (s Status) Final() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Runnable reports whether an attempt may start on a job in status s: it
// is neither final nor being cancelled.
func (s Status) Runnable() bool { return !s.Final() && s != StatusCancelling }
