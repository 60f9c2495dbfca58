package job

// Status is where a job stands. These strings are the job document's
// status (openapi.yaml's JobStatus), the jobs table's status column and
// the status the worker framework reports; this is their one definition.
type Status string

const (
	// Queued: accepted by the gateway, waiting for a worker.
	Queued Status = "queued"
	// Processing: an attempt owns the job.
	Processing Status = "processing"
	// Retrying: the last attempt failed transiently; the next is due.
	Retrying Status = "retrying"
	// Succeeded: the effect happened. Final.
	Succeeded Status = "succeeded"
	// Failed: a permanent error, or the attempts ran out. Final, until the
	// job is replayed from the dead-letter queue.
	Failed Status = "failed"
)

// Statuses lists every status, in the order a job moves through them.
func Statuses() []Status { return []Status{Queued, Processing, Retrying, Succeeded, Failed} }

// Final reports whether s ends a job: Succeeded or Failed.
func (s Status) Final() bool { return s == Succeeded || s == Failed }
