package job

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
	sub       *Submitter
	inspector *asynq.Inspector
}

// NewDeadLetters returns the dead-letter view of e's jobs.
func NewDeadLetters(e *Submitter, inspector *asynq.Inspector) *DeadLetters {
	return &DeadLetters{sub: e, inspector: inspector}
}

// DeadLetter is one failed job and whether asynq still holds its task.
type DeadLetter struct {
	Row
	Archived bool
}

// List returns failed jobs, newest first.
func (d *DeadLetters) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	jobs, err := d.sub.records.Failed(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(jobs))
	for i, j := range jobs {
		out[i] = DeadLetter{Row: j}
		info, err := d.inspector.GetTaskInfo(j.Queue, TaskID(j))
		switch {
		case err == nil:
			out[i].Archived = info.State == asynq.TaskStateArchived
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		default:
			return nil, fmt.Errorf("job: inspect %s: %w", j.ID, err)
		}
	}
	return out, nil
}

// ErrNotFailed: the job exists but has not failed.
var ErrNotFailed = errors.New("job: not failed")

// Replay runs a failed job again: its archived task goes back to pending
// (or, when asynq no longer has it, a new task with the same id is
// enqueued from the recorded payload) and its record back to queued.
func (d *DeadLetters) Replay(ctx context.Context, id string) (Row, error) {
	r, err := d.sub.records.ByID(ctx, id)
	if err != nil {
		return Row{}, err
	}
	if r.Status != StatusFailed {
		return Row{}, fmt.Errorf("%w: %s is %s", ErrNotFailed, id, r.Status)
	}
	err = d.inspector.RunTask(r.Queue, TaskID(r))
	switch {
	case err == nil:
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		if err := d.sub.enqueue(ctx, r); err != nil {
			return Row{}, err
		}
	default:
		return Row{}, fmt.Errorf("job: replay %s: %w", id, err)
	}
	// The worker may already be running it; only a still-failed record
	// goes back to queued.
	if err := d.sub.records.Requeue(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return Row{}, err
	}
	return d.sub.records.ByID(ctx, id)
}

// Delete discards a failed job: its archived task and its record. A retry
// of the original request still replays its 202; the job is then 404.
func (d *DeadLetters) Delete(ctx context.Context, id string) error {
	r, err := d.sub.records.ByID(ctx, id)
	if err != nil {
		return err
	}
	if r.Status != StatusFailed {
		return fmt.Errorf("%w: %s is %s", ErrNotFailed, id, r.Status)
	}
	err = d.inspector.DeleteTask(r.Queue, TaskID(r))
	if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("job: delete task %s: %w", id, err)
	}
	return d.sub.records.Delete(ctx, id)
}

// ErrNotBackingOff: the job is not waiting for a retry that is due later.
var ErrNotBackingOff = errors.New("job: not backing off")

// RunNow runs a job that is backing off (retrying, its task waiting in
// the queue's retry set for its next attempt) at once: the task goes to
// pending, and the worker that picks it up moves the record on as for any
// attempt. A job in any other state, or whose task is not waiting for a
// retry, is refused with ErrNotBackingOff.
func (d *DeadLetters) RunNow(ctx context.Context, id string) (Row, error) {
	r, err := d.sub.records.ByID(ctx, id)
	if err != nil {
		return Row{}, err
	}
	if r.Status != StatusRetrying {
		return r, fmt.Errorf("%w: %s is %s", ErrNotBackingOff, id, r.Status)
	}
	info, err := d.inspector.GetTaskInfo(r.Queue, TaskID(r))
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return r, fmt.Errorf("%w: the queue holds no task of %s (requeue it)", ErrNotBackingOff, id)
	case err != nil:
		return r, fmt.Errorf("job: run now %s: %w", id, err)
	case info.State != asynq.TaskStateRetry && info.State != asynq.TaskStateScheduled:
		return r, fmt.Errorf("%w: its task is %s", ErrNotBackingOff, info.State)
	}
	if err := d.inspector.RunTask(r.Queue, TaskID(r)); err != nil {
		return r, fmt.Errorf("job: run now %s: %w", id, err)
	}
	return r, nil
}
