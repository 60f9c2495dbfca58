package workers

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// WithFairness makes the Server end the tasks of pooled jobs with
// their fairness pool (job.Fairness): a task that finishes leaves the
// pool's window, and one that would be retried goes back to the pool, due
// after the same delay asynq would have waited, to be tagged at its
// tenant's position then; its asynq task is acked. When the pool cannot be
// written, asynq retries the task as it does any other, so no job is
// lost. The Server does not dispatch: run f.Run beside it.
func WithFairness(f *job.Fairness) ServerOption {
	return func(s *Server) { s.fair = f }
}

// processPooled runs a pooled job's task and ends it with its pool.
func (s *Server) processPooled(ctx context.Context, task *asynq.Task) error {
	s.fair.Started(task)
	err := s.handler.ProcessTask(ctx, task)
	fctx, cancel := finishContext(ctx)
	defer cancel()
	switch {
	case errors.Is(err, errCrashed) || (err != nil && ctx.Err() != nil):
		// A worker that died, or one shutting down: asynq gives the task
		// back, and it stays in the window meanwhile.
		return err
	case err == nil || errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask):
		if derr := s.fair.Done(fctx, task); derr != nil {
			// The reconcile pass drops it from the window once it sees
			// the job finished.
			s.logger.WarnContext(ctx, "fairness: a finished job stays in its pool's window until reconciled",
				"job_id", task.Headers()[job.HeaderID], "err", derr)
		}
		return err
	}
	failed := IsFailure(err)
	due := s.cfg.Retry.Now().Add(s.cfg.Retry.RetryDelay(job.Failures(task), err, task))
	if berr := s.fair.Back(fctx, task, due, failed); berr != nil {
		s.logger.WarnContext(ctx, "fairness: the job could not go back to its pool; asynq retries its task",
			"job_id", task.Headers()[job.HeaderID], "err", berr)
		return err
	}
	return nil
}
