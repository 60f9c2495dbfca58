package workers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// NotDueError gives back a task handed over before its job's not_before
// (job.HeaderNotBefore): a worker whose clock is ahead of the producer's,
// a task the relay or an older gateway enqueued at once. It is not an
// attempt and not a failure: nothing is recorded, the job's attempts are
// not counted, and RetryDelay brings the task back when it is due.
type NotDueError struct {
	Task      string
	NotBefore time.Time
	// Wait is how long was left until NotBefore.
	Wait time.Duration
}

func (e *NotDueError) Error() string {
	return fmt.Sprintf("%s is not due until %s (in %s)", e.Task, e.NotBefore.Format(time.RFC3339Nano), e.Wait)
}

// notDue returns a *NotDueError when task carries a not_before still
// ahead of now, and nil otherwise: no header (a job that runs at once, a
// task enqueued by hand), a time past, or one that does not parse, which
// no Submitter writes and which must not hold a job forever.
func notDue(task *asynq.Task, now time.Time) error {
	v := task.Headers()[job.HeaderNotBefore]
	if v == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil
	}
	if wait := t.Sub(now); wait > 0 {
		return &NotDueError{Task: task.Type(), NotBefore: t, Wait: wait}
	}
	return nil
}

// giveBackEarly is ProcessTask's first step: a task whose job is not due
// goes back to the queue until it is, before anything is read or counted.
func giveBackEarly(ctx context.Context, log *slog.Logger, task *asynq.Task) error {
	err := notDue(task, time.Now())
	if err != nil {
		log.DebugContext(ctx, "task handed over before its job is due: giving it back", "err", err)
	}
	return err
}
