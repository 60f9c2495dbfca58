package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// Relay defaults.
const (
	DefaultRequeueAfter    = time.Minute
	DefaultRequeueInterval = 15 * time.Second
	DefaultRelayBatch      = 500
)

// TaskInspector is what the relay asks asynq. An *asynq.Inspector is one.
type TaskInspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
}

var _ TaskInspector = (*asynq.Inspector)(nil)

// TaskState is the state asynq holds a task in ("pending", "active",
// "scheduled", "retry", "archived", …), or "" when it holds none.
func TaskState(inspector TaskInspector, queue, id string) (string, error) {
	info, err := inspector.GetTaskInfo(queue, id)
	switch {
	case err == nil:
		return info.State.String(), nil
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return "", nil
	}
	return "", fmt.Errorf("job: inspect task %s: %w", id, err)
}

// RelayOptions adjust a Relay. The zero value takes every default.
type RelayOptions struct {
	// After is the grace period: a job is checked once its record has
	// not changed for After, so a task the gateway is still enqueueing
	// is left alone. Default DefaultRequeueAfter.
	After time.Duration
	// Interval is the time between two passes of Run. Default
	// DefaultRequeueInterval.
	Interval time.Duration
	// Batch is the most jobs one pass checks. Default DefaultRelayBatch.
	Batch int
	// Logger gets a line for each task enqueued again and for each pass
	// that failed. Default slog.Default().
	Logger *slog.Logger

	// Locks, if set, turns on the takeover passes (takeover.go): a job
	// whose worker lost its resource lock is enqueued again under a
	// takeover TaskID once Locks says nobody holds the lock. The worker
	// sets it to its own lock.Locker.
	Locks LockProbe
	// LockTTL is the workers' lock_ttl: a job is taken over once its
	// execution has not changed for LockTTL and its lock is gone. Default
	// 30s.
	LockTTL time.Duration
	// TakeoverInterval is the time between two takeover passes. Default
	// LockTTL/2.
	TakeoverInterval time.Duration
}

func (o RelayOptions) withDefaults() RelayOptions {
	if o.After <= 0 {
		o.After = DefaultRequeueAfter
	}
	if o.Interval <= 0 {
		o.Interval = DefaultRequeueInterval
	}
	if o.Batch <= 0 {
		o.Batch = DefaultRelayBatch
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LockTTL <= 0 {
		o.LockTTL = 30 * time.Second
	}
	return o
}

// Relay delivers the tasks the broker forgot. The jobs table is the truth:
// a job that has not finished must have a task in asynq, but asynq's Redis
// can lose tasks (a restart without persistence, a failover), and the
// gateway accepts a job whose enqueue failed after its record was written
// (ErrTaskDeferred). Each pass reads the unfinished jobs whose record has
// not changed for the grace period, oldest first, asks asynq for each
// task, and enqueues the missing ones as Submit does: same TaskID, queue,
// headers and MaxRetry.
//
// Several processes may run a relay at once: asynq keeps one task per
// TaskID, so of two relays enqueueing the same job one is refused and
// counts the task as present. A task that finishes between the read of its
// record and the check is enqueued again, harmlessly: the worker acks a job
// whose business key has already succeeded.
//
// A pass reads at most Batch jobs, continuing where the previous pass
// stopped, so a backlog of old jobs whose tasks are merely waiting does
// not hide the missing ones behind it; after the last job it starts again
// from the oldest.
//
// With RelayOptions.Locks, the relay also hands over the jobs whose worker
// lost its lock, within about the lock TTL rather than asynq's minute of
// lease and recovery (takeover.go).
type Relay struct {
	sub       *Submitter
	inspector TaskInspector
	opts      RelayOptions

	mu   sync.Mutex // one pass at a time; guards next
	next position
	// takeMu: one takeover pass at a time.
	takeMu sync.Mutex
}

// NewRelay returns a relay that checks e's jobs with inspector and
// enqueues their missing tasks with e.
func NewRelay(e *Submitter, inspector TaskInspector, opts RelayOptions) *Relay {
	return &Relay{sub: e, inspector: inspector, opts: opts.withDefaults()}
}

// Pass is what one pass of the relay did.
type Pass struct {
	// Checked counts the jobs whose task the pass looked for.
	Checked int
	// Requeued lists the jobs whose task the pass enqueued again.
	Requeued []string
}

// Run makes a pass at once and then every Interval until ctx ends, and
// returns nil then; with Locks set, it makes a takeover pass every
// TakeoverInterval too. A pass that fails (the queue, the database or the
// locks' Redis is unreachable) is logged; the next one tries again.
func (r *Relay) Run(ctx context.Context) error {
	tick := time.NewTicker(r.opts.Interval)
	defer tick.Stop()
	var takeover <-chan time.Time
	if r.opts.Locks != nil {
		t := time.NewTicker(r.opts.takeoverInterval())
		defer t.Stop()
		takeover = t.C
	}
	for {
		p, err := r.Pass(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			r.opts.Logger.WarnContext(ctx, "relay: pass failed; the next pass tries again", "checked", p.Checked, "requeued", len(p.Requeued), "err", err)
		case len(p.Requeued) > 0:
			r.opts.Logger.InfoContext(ctx, "relay: pass done", "checked", p.Checked, "requeued", len(p.Requeued))
		}
		if !r.untilNextPass(ctx, tick.C, takeover) {
			return nil
		}
	}
}

// untilNextPass waits for the next pass, making the takeover passes due
// meanwhile, and reports false once ctx has ended.
func (r *Relay) untilNextPass(ctx context.Context, pass, takeover <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-pass:
			return true
		case <-takeover:
			if _, err := r.TakeOver(ctx); err != nil && ctx.Err() == nil {
				r.opts.Logger.WarnContext(ctx, "relay: takeover pass failed; the next pass tries again", "err", err)
			}
		}
	}
}

// Pass checks the next batch of unfinished jobs older than the grace
// period and enqueues the tasks asynq has lost. On an error it stops; the
// next pass resumes after the job that failed, so a job whose task cannot
// be enqueued does not hold back the others (it is tried again on the
// next round).
func (r *Relay) Pass(ctx context.Context) (Pass, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p Pass
	jobs, err := r.sub.records.unfinished(ctx, r.opts.After, r.next, r.opts.Batch)
	if err != nil {
		return p, fmt.Errorf("job: relay: %w", err)
	}
	for _, j := range jobs {
		r.next = position{updatedAt: j.UpdatedAt, id: j.ID}
		sent, err := r.redeliver(ctx, j)
		if err != nil {
			return p, fmt.Errorf("job: relay: %w", err)
		}
		p.Checked++
		if sent {
			p.Requeued = append(p.Requeued, j.ID)
			r.opts.Logger.InfoContext(ctx, "relay: task re-enqueued", "job_id", j.ID, "task", j.Task, "queue", j.Queue,
				"tenant", j.Tenant, "status", string(j.Status), "unchanged_for", time.Since(j.UpdatedAt).Round(time.Second).String())
		}
	}
	if len(jobs) < r.opts.Batch {
		r.next = position{} // the end: the next pass starts from the oldest
	}
	return p, nil
}

// ErrFinished: the job has succeeded, failed or been cancelled; it has no
// task to deliver.
// A failed job runs again through DeadLetters.Replay.
var ErrFinished = errors.New("job: finished")

// Requeue enqueues the task of the unfinished job id if asynq no longer
// holds it, however recent its record, and reports whether it did. A
// finished job is returned with an error wrapping ErrFinished; an unknown
// id is ErrNotFound.
func (r *Relay) Requeue(ctx context.Context, id string) (Row, bool, error) {
	j, err := r.sub.records.ByID(ctx, id)
	if err != nil {
		return Row{}, false, err
	}
	if j.Status.Final() {
		return j, false, fmt.Errorf("%w: %s is %s", ErrFinished, id, j.Status)
	}
	sent, err := r.redeliver(ctx, j)
	return j, sent, err
}

// redeliver enqueues j's task unless asynq holds it, and reports whether
// this call enqueued it. A pooled job asynq does not hold is filed again
// in its pool unless the pool holds it (ready, delayed or in flight, the
// last repaired by the dispatcher's reconcile pass).
func (r *Relay) redeliver(ctx context.Context, j Row) (bool, error) {
	state, err := TaskState(r.inspector, j.Queue, TaskID(j))
	if err != nil || state != "" {
		return false, err
	}
	return r.sub.deliver(ctx, j)
}
