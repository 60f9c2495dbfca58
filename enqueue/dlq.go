package enqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// DeadLetters are the failed jobs. The jobs table is their source of truth:
// asynq's archive is bounded (it trims old and excess tasks), so a failed
// job whose archived task is gone is still listed and can still be
// replayed from its recorded payload.
type DeadLetters struct {
	enq       *Enqueuer
	inspector *asynq.Inspector
}

// NewDeadLetters returns the dead-letter view of e's jobs.
func NewDeadLetters(e *Enqueuer, inspector *asynq.Inspector) *DeadLetters {
	return &DeadLetters{enq: e, inspector: inspector}
}

// DeadLetter is one failed job and whether asynq still holds its task.
type DeadLetter struct {
	Job
	Archived bool
}

// List returns failed jobs, newest first.
func (d *DeadLetters) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	jobs, err := d.enq.jobs.Failed(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(jobs))
	for i, j := range jobs {
		out[i] = DeadLetter{Job: j}
		info, err := d.inspector.GetTaskInfo(j.Queue, j.ID)
		switch {
		case err == nil:
			out[i].Archived = info.State == asynq.TaskStateArchived
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		default:
			return nil, fmt.Errorf("enqueue: inspect %s: %w", j.ID, err)
		}
	}
	return out, nil
}

// ErrNotFailed: the job exists but has not failed.
var ErrNotFailed = errors.New("enqueue: job has not failed")

// Replay runs a failed job again: its archived task goes back to pending
// (or, when asynq no longer has it, a new task with the same id is
// enqueued from the recorded payload) and its record back to queued.
func (d *DeadLetters) Replay(ctx context.Context, id string) (Job, error) {
	job, err := d.enq.jobs.ByID(ctx, id)
	if err != nil {
		return Job{}, err
	}
	if job.Status != StatusFailed {
		return Job{}, fmt.Errorf("%w: %s is %s", ErrNotFailed, id, job.Status)
	}
	err = d.inspector.RunTask(job.Queue, id)
	switch {
	case err == nil:
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		if err := d.enq.enqueue(ctx, job); err != nil {
			return Job{}, err
		}
	default:
		return Job{}, fmt.Errorf("enqueue: replay %s: %w", id, err)
	}
	// The worker may already be running it; only a still-failed record
	// goes back to queued.
	if err := d.enq.jobs.Requeue(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return Job{}, err
	}
	return d.enq.jobs.ByID(ctx, id)
}

// Delete discards a failed job: its archived task and its record. A retry
// of the original request still replays its 202; the job is then 404.
func (d *DeadLetters) Delete(ctx context.Context, id string) error {
	job, err := d.enq.jobs.ByID(ctx, id)
	if err != nil {
		return err
	}
	if job.Status != StatusFailed {
		return fmt.Errorf("%w: %s is %s", ErrNotFailed, id, job.Status)
	}
	err = d.inspector.DeleteTask(job.Queue, id)
	if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("enqueue: delete task %s: %w", id, err)
	}
	return d.enq.jobs.Delete(ctx, id)
}
