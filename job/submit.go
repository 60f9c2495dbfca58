package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
)

// Task headers carried with every task.
const (
	HeaderID     = "job_id"
	HeaderTenant = "tenant"
	// HeaderBusinessKey carries the business key of a job whose key is
	// not its payload's: a recurring schedule's fire (FireRoute), whose
	// body is the same at every slot. The worker takes it over the key
	// the payload renders.
	HeaderBusinessKey = "business_key"
)

// MaxRetry is the asynq.MaxRetry every task of a job is enqueued with:
// effectively unlimited. The worker framework, not asynq, decides when a
// job has used its attempts: it counts real attempts in job_executions and
// dead-letters the job itself after its MaxAttempts. A smaller asynq budget
// would also be spent by redeliveries after a crash and by busy locks
// (which are not attempts), and asynq archives a task whose budget is
// spent. A task enqueued by hand for a workers handler takes it too:
//
//	client.Enqueue(task, asynq.MaxRetry(job.MaxRetry))
const MaxRetry = math.MaxInt32

// Submitter submits jobs.
type Submitter struct {
	records *Store
	client  *asynq.Client
	// Headers, when set, adds headers to each task (trace context).
	Headers func(ctx context.Context) map[string]string
	// Inspector, when set, lets Cancel delete the task of a job it
	// cancelled. Optional: a cancelled job's task does nothing anyway.
	Inspector *asynq.Inspector
	// Broker, when set, makes Submit return only once the task it
	// enqueued is on the queue's replicas, or the wait's timeout passed
	// (brokerwait.go). The relay's enqueues do not wait.
	Broker *BrokerWait
	// Shards spreads each queue over this many asynq queues, chosen by
	// tenant (shard.go); 0 or 1: one queue.
	Shards int
	// Fairness, when set, holds the jobs of the declared pools: a job
	// whose Spec names a pool waits there for its turn (fair.go) instead
	// of going to asynq at once.
	Fairness *Fairness
}

// NewSubmitter returns a Submitter that writes job rows on db and tasks
// with client.
func NewSubmitter(db DB, client *asynq.Client) *Submitter {
	return &Submitter{records: NewStore(db), client: client}
}

// Get returns tenant's job with id.
func (e *Submitter) Get(ctx context.Context, tenant, id string) (Row, error) {
	return e.records.Get(ctx, tenant, id)
}

// Records is the record store the Submitter writes.
func (e *Submitter) Records() *Store { return e.records }

// Request is one accepted request to turn into a job.
type Request struct {
	Tenant, Route, Key string
	// Spec is the declared job the request becomes: its task, schema and
	// business key template. Required.
	Spec *Spec
	// Queue overrides Spec.Queue when set (a route's own queue).
	Queue string
	Body  []byte
	// Schedule is when the job runs: the zero Schedule takes the job's
	// Delay. The caller checks it first (Spec.CheckSchedule).
	Schedule Schedule
	// MaxDepth bounds how deep the body's arrays and objects nest. A
	// deeper body is refused with a *PayloadError wrapping ErrInvalid,
	// before it is decoded. Defaults to DefaultMaxDepth, 64.
	//
	// Only a submitted body is bounded: a job recorded before a lower
	// bound was set still runs, and the worker reads it as it was taken.
	MaxDepth int
}

// DefaultMaxDepth is Request.MaxDepth when it is 0: deeper than any
// payload a schema describes by hand, and shallow enough that every
// reader of a payload (the worker, a receiver, the console) walks it
// cheaply.
const DefaultMaxDepth = 64

// Decode validates the body as Submit does: its nesting (MaxDepth), then
// its job's Spec.Decode.
func (r Request) Decode() (Payload, error) {
	depth := r.MaxDepth
	if depth <= 0 {
		depth = DefaultMaxDepth
	}
	return r.Spec.decode(r.Body, depth)
}

// QueueName is the queue the job goes to: the request's own, else its
// job's, else DefaultQueue.
func (r Request) QueueName() string {
	switch {
	case r.Queue != "":
		return r.Queue
	case r.Spec != nil && r.Spec.Queue != "":
		return r.Spec.Queue
	}
	return DefaultQueue
}

// ErrTaskDeferred: Submit recorded the job but could not enqueue its task
// (the queue was unreachable), or could not see it reach the queue's
// replicas in time (BrokerWait), so that a failover may lose it. The job is accepted all the same: its
// record is the truth, and the Relay enqueues the missing task once the
// queue answers again. Submit returns the recorded job with it.
var ErrTaskDeferred = errors.New("job: recorded, its task deferred to the relay")

// Submit validates the body against the job's schema, records the job and
// enqueues its task. It is idempotent: the same request again returns the
// same job and enqueues nothing new. A *PayloadError means nothing was
// recorded or enqueued. An error wrapping ErrTaskDeferred comes with the
// recorded job: it is accepted, and only its task is late.
func (e *Submitter) Submit(ctx context.Context, req Request) (Row, error) {
	if req.Spec == nil {
		return Row{}, errors.New("job: submit: no job spec")
	}
	p, err := req.Decode()
	if err != nil {
		return Row{}, err
	}
	queue := ShardQueue(req.QueueName(), req.Tenant, e.Shards)
	var j Row
	var folded bool
	if req.Spec.Debounce != nil {
		j, folded, err = e.submitDebounced(ctx, req, p, queue)
	} else {
		j, _, err = e.records.create(ctx, Row{
			ID: ID(req.Tenant, req.Route, req.Key), Tenant: req.Tenant, Route: req.Route, IdempotencyKey: req.Key,
			Task: req.Spec.Task, Queue: queue, BusinessKey: p.BusinessKey, Payload: req.Body,
		}, req.Spec.effective(req.Schedule))
	}
	if err != nil {
		return Row{}, err
	}
	if j.Status == StatusQueued || j.Status == StatusScheduled {
		// Enqueue even when the record already existed: the gateway may
		// have died between the two steps. asynq keeps one task per id.
		if err := e.enqueue(ctx, j); err != nil {
			return j, fmt.Errorf("%w: %w", ErrTaskDeferred, err)
		}
		if folded {
			e.dropSuperseded(ctx, j)
		}
		if _, pooled := e.Fairness.pooled(j.Task); e.Broker != nil && !pooled {
			// Also when asynq held the task already: this may be the
			// retry of a request whose wait fell short.
			if err := e.Broker.wait(ctx, j.Queue); err != nil {
				return j, fmt.Errorf("%w: %w", ErrTaskDeferred, err)
			}
		}
	}
	return j, nil
}

// enqueue sends r's task, or files r in its fairness pool when its job
// names one. A task asynq already holds under the job id, or a job its
// pool holds, is not an error: it is the same job.
func (e *Submitter) enqueue(ctx context.Context, r Row) error {
	_, err := e.deliver(ctx, r)
	return err
}

// deliver is enqueue, reporting whether it sent the task or filed the job
// as new.
func (e *Submitter) deliver(ctx context.Context, r Row) (bool, error) {
	if u, ok := e.Fairness.pooled(r.Task); ok {
		return e.Fairness.add(ctx, u, r)
	}
	return e.send(ctx, r)
}

// send sends r's task and reports whether asynq took it as new: false
// when it already held a task with the job id. It is the one way a job's
// task is built. A job with a not_before is enqueued to be processed then
// (asynq.ProcessAt at ProcessAt(not_before); a time past is processed at
// once), and carries it in HeaderNotBefore.
func (e *Submitter) send(ctx context.Context, r Row) (bool, error) {
	return e.sendAs(ctx, r, TaskID(r), nil)
}

// sendAs is send under the TaskID taskID: the job's own id, or a takeover
// task's (TakeoverTaskID), with the headers extra too (a pooled job's).
func (e *Submitter) sendAs(ctx context.Context, r Row, taskID string, extra map[string]string) (bool, error) {
	headers := map[string]string{HeaderID: r.ID, HeaderTenant: r.Tenant}
	if _, fired := ScheduleOf(r); fired {
		headers[HeaderBusinessKey] = r.BusinessKey
	}
	for k, v := range extra {
		headers[k] = v
	}
	if e.Headers != nil {
		for k, v := range e.Headers(ctx) {
			headers[k] = v
		}
	}
	opts := []asynq.Option{asynq.TaskID(taskID), asynq.Queue(r.Queue), asynq.MaxRetry(MaxRetry)}
	if r.Debounce != nil {
		headers[HeaderDebounce] = strconv.Itoa(r.Debounce.Coalesced)
	}
	if r.NotBefore != nil {
		headers[HeaderNotBefore] = r.NotBefore.UTC().Format(time.RFC3339Nano)
		opts = append(opts, asynq.ProcessAt(ProcessAt(*r.NotBefore)))
	}
	task := asynq.NewTaskWithHeaders(r.Task, r.Payload, headers, opts...)
	_, err := e.client.EnqueueContext(ctx, task)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, asynq.ErrTaskIDConflict):
		return false, nil
	}
	return false, fmt.Errorf("job: enqueue %s: %w", taskID, err)
}
