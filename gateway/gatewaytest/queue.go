package gatewaytest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
)

// Queue is an in-memory gateway.Submitter. Submit validates the body against
// the job's schema and, like the real job store, returns the existing job
// for a (tenant, route, key) it has seen. The zero value is not usable;
// call NewQueue.
type Queue struct {
	// Before, when set, runs at the start of every Submit; an error it
	// returns is Submit's (a queue outage). It may block to keep a
	// request in flight.
	Before func(ctx context.Context, req job.Request) error
	// BeforeGet, when set, runs at the start of every Get; an error it
	// returns is Get's.
	BeforeGet func(ctx context.Context, tenant, id string) error
	Now       func() time.Time

	mu   sync.Mutex
	jobs map[string]job.Row
}

var _ gateway.Submitter = (*Queue)(nil)

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	return &Queue{Now: time.Now, jobs: map[string]job.Row{}}
}

// Submit records the job of req, or returns the one already recorded.
func (j *Queue) Submit(ctx context.Context, req job.Request) (job.Row, error) {
	if j.Before != nil {
		if err := j.Before(ctx, req); err != nil {
			return job.Row{}, err
		}
	}
	if req.Spec == nil {
		return job.Row{}, errors.New("gatewaytest: submit: no job spec")
	}
	p, err := req.Decode()
	if err != nil {
		return job.Row{}, err
	}
	id := job.ID(req.Tenant, req.Route, req.Key)
	j.mu.Lock()
	defer j.mu.Unlock()
	if rec, ok := j.jobs[id]; ok {
		return rec, nil
	}
	now := j.Now().UTC()
	rec := job.Row{
		ID: id, Task: req.Spec.Task, Status: job.StatusQueued, CreatedAt: now, UpdatedAt: now,
		Tenant: req.Tenant, Route: req.Route, IdempotencyKey: req.Key, Queue: req.QueueName(),
		BusinessKey: p.BusinessKey, Payload: append([]byte(nil), req.Body...),
		NotBefore: req.Spec.NotBefore(req.Schedule, now),
	}
	if rec.NotBefore != nil && rec.NotBefore.After(now) {
		rec.Status = job.StatusScheduled
	}
	j.jobs[id] = rec
	return rec, nil
}

// Get returns tenant's job with id, or job.ErrNotFound.
func (j *Queue) Get(ctx context.Context, tenant, id string) (job.Row, error) {
	if j.BeforeGet != nil {
		if err := j.BeforeGet(ctx, tenant, id); err != nil {
			return job.Row{}, err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	rec, ok := j.jobs[id]
	if !ok || rec.Tenant != tenant {
		return job.Row{}, job.ErrNotFound
	}
	return rec, nil
}

// Update changes a recorded job as a worker would (status, attempts,
// result_ref, error) and reports whether it exists.
func (j *Queue) Update(id string, change func(*job.Row)) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	rec, ok := j.jobs[id]
	if ok {
		change(&rec)
		rec.UpdatedAt = j.Now().UTC()
		j.jobs[id] = rec
	}
	return ok
}
