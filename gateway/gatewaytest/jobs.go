package gatewaytest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/gateway"
)

// Jobs is an in-memory gateway.Jobs. Submit validates the body against
// the job's schema and, like the real job store, returns the existing job
// for a (tenant, route, key) it has seen. The zero value is not usable;
// call NewJobs.
type Jobs struct {
	// Before, when set, runs at the start of every Submit; an error it
	// returns is Submit's (a queue outage). It may block to keep a
	// request in flight.
	Before func(ctx context.Context, req enqueue.Request) error
	// BeforeGet, when set, runs at the start of every Get; an error it
	// returns is Get's.
	BeforeGet func(ctx context.Context, tenant, id string) error
	Now       func() time.Time

	mu   sync.Mutex
	jobs map[string]enqueue.Job
}

var _ gateway.Jobs = (*Jobs)(nil)

// NewJobs returns an empty queue.
func NewJobs() *Jobs {
	return &Jobs{Now: time.Now, jobs: map[string]enqueue.Job{}}
}

// Submit records the job of req, or returns the one already recorded.
func (j *Jobs) Submit(ctx context.Context, req enqueue.Request) (enqueue.Job, error) {
	if j.Before != nil {
		if err := j.Before(ctx, req); err != nil {
			return enqueue.Job{}, err
		}
	}
	if req.Spec == nil {
		return enqueue.Job{}, errors.New("gatewaytest: submit: no job spec")
	}
	p, err := req.Spec.Decode(req.Body)
	if err != nil {
		return enqueue.Job{}, err
	}
	id := enqueue.JobID(req.Tenant, req.Route, req.Key)
	j.mu.Lock()
	defer j.mu.Unlock()
	if job, ok := j.jobs[id]; ok {
		return job, nil
	}
	now := j.Now().UTC()
	job := enqueue.Job{
		ID: id, Task: req.Spec.Task, Status: enqueue.StatusQueued, CreatedAt: now, UpdatedAt: now,
		Tenant: req.Tenant, Route: req.Route, IdempotencyKey: req.Key, Queue: req.QueueName(),
		BusinessKey: p.BusinessKey, Payload: append([]byte(nil), req.Body...),
	}
	j.jobs[id] = job
	return job, nil
}

// Get returns tenant's job with id, or enqueue.ErrNotFound.
func (j *Jobs) Get(ctx context.Context, tenant, id string) (enqueue.Job, error) {
	if j.BeforeGet != nil {
		if err := j.BeforeGet(ctx, tenant, id); err != nil {
			return enqueue.Job{}, err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.jobs[id]
	if !ok || job.Tenant != tenant {
		return enqueue.Job{}, enqueue.ErrNotFound
	}
	return job, nil
}

// Update changes a recorded job as a worker would (status, attempts,
// result_ref, error) and reports whether it exists.
func (j *Jobs) Update(id string, change func(*enqueue.Job)) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.jobs[id]
	if ok {
		change(&job)
		job.UpdatedAt = j.Now().UTC()
		j.jobs[id] = job
	}
	return ok
}
