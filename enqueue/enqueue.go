package enqueue

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// Task headers carried with every task.
const (
	HeaderJobID  = "job_id"
	HeaderTenant = "tenant"
)

// MaxRetry is what tasks are enqueued with: the worker framework, not
// asynq, decides when a job has used its attempts (lock contention is not
// one), so asynq must never give up first.
const MaxRetry = math.MaxInt32

// Enqueuer submits jobs.
type Enqueuer struct {
	jobs   *Jobs
	client *asynq.Client
	// Headers, when set, adds headers to each task (trace context).
	Headers func(ctx context.Context) map[string]string
}

// New returns an Enqueuer writing job records on db and tasks with client.
func New(db DB, client *asynq.Client) *Enqueuer {
	return &Enqueuer{jobs: NewJobs(db), client: client}
}

// Get returns tenant's job with id.
func (e *Enqueuer) Get(ctx context.Context, tenant, id string) (Job, error) {
	return e.jobs.Get(ctx, tenant, id)
}

// Jobs is the job store the Enqueuer writes.
func (e *Enqueuer) Jobs() *Jobs { return e.jobs }

// Request is one accepted request to turn into a job.
type Request struct {
	Tenant, Route, Key string
	// Spec is the declared job the request becomes: its task, schema and
	// business key template. Required.
	Spec *job.Spec
	// Queue overrides Spec.Queue when set (a route's own queue).
	Queue string
	Body  []byte
}

// QueueName is the queue the job goes to: the request's own, else its
// job's, else job.DefaultQueue.
func (r Request) QueueName() string {
	switch {
	case r.Queue != "":
		return r.Queue
	case r.Spec != nil && r.Spec.Queue != "":
		return r.Spec.Queue
	}
	return job.DefaultQueue
}

// ErrTaskDeferred: Submit recorded the job but could not enqueue its task
// (the queue was unreachable). The job is accepted all the same: its
// record is the truth, and the Relay enqueues the missing task once the
// queue answers again. Submit returns the recorded job with it.
var ErrTaskDeferred = errors.New("enqueue: job recorded, its task deferred to the relay")

// Submit validates the body against the job's schema, records the job and
// enqueues its task. It is idempotent: the same request again returns the
// same job and enqueues nothing new. A *job.PayloadError means nothing was
// recorded or enqueued. An error wrapping ErrTaskDeferred comes with the
// recorded job: it is accepted, and only its task is late.
func (e *Enqueuer) Submit(ctx context.Context, req Request) (Job, error) {
	if req.Spec == nil {
		return Job{}, errors.New("enqueue: submit: no job spec")
	}
	p, err := req.Spec.Decode(req.Body)
	if err != nil {
		return Job{}, err
	}
	queue := req.QueueName()
	j, _, err := e.jobs.create(ctx, Job{
		ID: JobID(req.Tenant, req.Route, req.Key), Tenant: req.Tenant, Route: req.Route, IdempotencyKey: req.Key,
		Task: req.Spec.Task, Queue: queue, BusinessKey: p.BusinessKey, Payload: req.Body,
	})
	if err != nil {
		return Job{}, err
	}
	if j.Status == StatusQueued {
		// Enqueue even when the record already existed: the gateway may
		// have died between the two steps. asynq keeps one task per id.
		if err := e.enqueue(ctx, j); err != nil {
			return j, fmt.Errorf("%w: %w", ErrTaskDeferred, err)
		}
	}
	return j, nil
}

// enqueue sends job's task. A task asynq already holds under the job id is
// not an error: it is the same job.
func (e *Enqueuer) enqueue(ctx context.Context, job Job) error {
	_, err := e.send(ctx, job)
	return err
}

// send sends job's task and reports whether asynq took it as new: false
// when it already held a task with the job id. It is the one way a job's
// task is built.
func (e *Enqueuer) send(ctx context.Context, job Job) (bool, error) {
	headers := map[string]string{HeaderJobID: job.ID, HeaderTenant: job.Tenant}
	if e.Headers != nil {
		for k, v := range e.Headers(ctx) {
			headers[k] = v
		}
	}
	task := asynq.NewTaskWithHeaders(job.Task, job.Payload, headers,
		asynq.TaskID(job.ID), asynq.Queue(job.Queue), asynq.MaxRetry(MaxRetry))
	_, err := e.client.EnqueueContext(ctx, task)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, asynq.ErrTaskIDConflict):
		return false, nil
	}
	return false, fmt.Errorf("enqueue: %s: %w", job.ID, err)
}
