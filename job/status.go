package job

// Status is where a job stands. These strings are the job document's
// status (openapi.yaml's JobStatus), the jobs table's status column and
// the status the worker framework reports; this is their one definition,
// and every other package names them as job.StatusQueued and so on.
type Status string

const (
	// StatusQueued: accepted by the gateway, waiting for a worker.
	StatusQueued Status = "queued"
	// StatusProcessing: an attempt owns the job.
	StatusProcessing Status = "processing"
	// StatusRetrying: the last attempt failed transiently; the next is due.
	StatusRetrying Status = "retrying"
	// StatusSucceeded: the effect happened. Final.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: a permanent error, or the attempts ran out. Final, until
	// the job is replayed from the dead-letter queue.
	StatusFailed Status = "failed"
)

// Statuses lists every status, in the order a job moves through them.
func Statuses() []Status {
	return []Status{StatusQueued, StatusProcessing, StatusRetrying, StatusSucceeded, StatusFailed}
}

// Final reports whether s ends a job: StatusSucceeded or StatusFailed.
func (s Status) Final() bool { return s == StatusSucceeded || s == StatusFailed }
