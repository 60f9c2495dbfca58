package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

// How an attempt, or a delivery that never became one, ends when it does
// not succeed: the verdict (retry, dead letter, a newer owner), what the
// execution state, the ledger and the job's status record of it, and the
// error that tells asynq what to do with the task. The algorithm that gets
// here is Handle's (handler.go).

// beforeAttempt handles an error met holding the lock but before fn ran.
func (r *run[T]) beforeAttempt(ctx context.Context, err error) error {
	if lost := r.lost(ctx, err, execution.OutcomeStaleToken); lost != nil {
		return lost
	}
	return r.h.transientBeforeAttempt(ctx, r.log, err)
}

// lost returns an *OwnershipLostError when err, or the lease, says a newer
// owner has the job, and nil otherwise. A stale token ends the attempt's
// ledger row as stale (OutcomeSuperseded when the business write refused
// it, OutcomeStaleToken when the execution state did), a lost lease as
// OutcomeLockLost.
func (r *run[T]) lost(ctx context.Context, err error, stale execution.Outcome) error {
	var cause error
	event := "lost"
	outcome := stale
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		r.h.obs.FencingRejected()
		cause, event = err, "fenced"
	case errors.Is(r.lease.Err(), lock.ErrLost):
		cause = errors.Join(err, r.lease.Err())
		outcome = execution.OutcomeLockLost
	default:
		return nil
	}
	if r.token != 0 {
		fctx, cancel := finishContext(ctx)
		if lerr := r.h.store.EndAttempt(fctx, r.id.tenant, r.id.key, r.token, outcome, cause.Error()); lerr != nil {
			r.log.WarnContext(ctx, "recording the lost attempt in the ledger failed", "error", lerr)
		}
		cancel()
	}
	r.h.obs.Attempt(r.h.kind, ClassStaleToken)
	r.log.WarnContext(ctx, "lost the job to a newer owner: stopping without a verdict",
		"lock_event", event, "error", cause)
	return &OwnershipLostError{Task: r.h.kind, Key: r.id.key, Resource: r.resource, Token: r.token, Err: cause}
}

// failed decides the fate of an attempt that ended in err.
func (r *run[T]) failed(ctx, fctx context.Context, err error) error {
	h := r.h
	if r.cancelRequested(fctx) {
		return r.cancelled(ctx, fctx, err)
	}
	if lost := r.lost(ctx, err, execution.OutcomeSuperseded); lost != nil {
		return lost
	}
	switch {
	case IsPermanent(err):
		return r.deadLetter(ctx, fctx, err, true)
	case IsUnavailable(err):
		return r.unavailable(ctx, fctx, err)
	case ctx.Err() != nil:
		// asynq cancelled the task (shutdown, deadline) and has already
		// requeued or rescheduled it, whatever we return: record the error
		// and leave the verdict to the next attempt.
	case r.attempts >= h.maxAttempts || budgetSpent(ctx):
		return r.deadLetter(ctx, fctx, err, false)
	}
	if merr := h.store.MarkRetrying(fctx, r.id.tenant, r.id.key, r.token, ledgerText(err)); merr != nil {
		if lost := r.lost(ctx, merr, execution.OutcomeStaleToken); lost != nil {
			return lost
		}
		r.log.WarnContext(ctx, "recording the retry failed", "error", merr)
	}
	h.obs.Attempt(h.kind, ClassTransient)
	h.status(fctx, r.task, r.id.key, job.StatusRetrying, r.attempts, "", publicReason(err))
	r.log.WarnContext(ctx, "attempt failed: will retry", "error", err)
	return fmt.Errorf("workers: %s %s attempt %d: %w", h.kind, r.id.key, r.attempts, err)
}

// unavailable handles an attempt that found a dependency unavailable: the
// error is recorded and the attempt given back (MarkUnavailable), and the
// task is retried with backoff however many times it has been so far.
func (r *run[T]) unavailable(ctx, fctx context.Context, err error) error {
	h := r.h
	if budgetSpent(ctx) {
		// asynq archives the task on this failure whatever we return:
		// record it, or the job would stay processing with no task left.
		return r.deadLetter(ctx, fctx, err, false)
	}
	attempts := r.attempts
	if merr := h.store.MarkUnavailable(fctx, r.id.tenant, r.id.key, r.token, ledgerText(err)); merr != nil {
		if lost := r.lost(ctx, merr, execution.OutcomeStaleToken); lost != nil {
			return lost
		}
		// The attempt stays counted: a lost write errs toward the
		// dead-letter queue, never toward retrying forever.
		r.log.WarnContext(ctx, "recording the unavailable dependency failed", "error", merr)
	} else {
		attempts--
	}
	h.obs.Attempt(h.kind, ClassUnavailable)
	h.status(fctx, r.task, r.id.key, job.StatusRetrying, attempts, "", publicReason(err))
	r.log.WarnContext(ctx, "dependency unavailable: will retry, the attempt not counted", "error", err)
	return fmt.Errorf("workers: %s %s: %w", h.kind, r.id.key, err)
}

// deadLetter marks the job failed and returns the error that makes asynq
// archive its task.
func (r *run[T]) deadLetter(ctx, fctx context.Context, err error, permanent bool) error {
	h := r.h
	class, prefix := ClassPermanent, ""
	if !permanent {
		class = ClassTransient
		if IsUnavailable(err) {
			class = ClassUnavailable
		}
		if r.attempts >= h.maxAttempts {
			prefix = fmt.Sprintf("attempts exhausted (%d of %d): ", min(r.attempts, h.maxAttempts), h.maxAttempts)
		} else {
			// Only a task enqueued without job.MaxRetry gets here.
			prefix = fmt.Sprintf("asynq retry budget spent after %d of %d attempts: ", r.attempts, h.maxAttempts)
		}
	}
	reason, public := prefix+ledgerText(err), prefix+publicReason(err)
	var merr error
	switch class {
	case ClassPermanent:
		merr = h.store.MarkFailed(fctx, r.id.tenant, r.id.key, r.token, reason)
	case ClassUnavailable:
		merr = h.store.MarkExhausted(fctx, r.id.tenant, r.id.key, r.token, execution.OutcomeUnavailable, reason)
	default:
		merr = h.store.MarkExhausted(fctx, r.id.tenant, r.id.key, r.token, execution.OutcomeTransient, reason)
	}
	if merr != nil {
		if lost := r.lost(ctx, merr, execution.OutcomeStaleToken); lost != nil {
			return lost
		}
		// Not recorded, so not archived: the next attempt decides again.
		h.obs.Attempt(h.kind, ClassTransient)
		r.log.ErrorContext(ctx, "recording the failure failed: will retry", "error", merr, "cause", err)
		return fmt.Errorf("workers: %s %s: record failure: %w", h.kind, r.id.key, errors.Join(merr, err))
	}
	h.obs.Attempt(h.kind, class)
	h.obs.JobFinished(h.kind, job.StatusFailed)
	h.status(fctx, r.task, r.id.key, job.StatusFailed, r.attempts, "", public)
	r.log.ErrorContext(ctx, "job failed: archiving", "error", reason)
	return fmt.Errorf("workers: %s %s failed: %w (%w)", h.kind, r.id.key, err, asynq.SkipRetry)
}

// replay acks a delivery of a job that has already succeeded.
func (h *handler[T]) replay(ctx context.Context, log *slog.Logger, task *asynq.Task, rec execution.State) error {
	h.obs.JobReplay(h.kind)
	h.status(ctx, task, rec.Key, job.StatusSucceeded, rec.Attempts, rec.ResultRef, "")
	log.InfoContext(ctx, "job already succeeded: acking the duplicate", "result_ref", rec.ResultRef, "attempt", rec.Attempts)
	return nil
}

// refuseGone acks a task whose job's record is gone (the jobs retention or
// an operator deleted it) without running it: a task replayed from asynq's
// archive after its job was deleted would run a job that no longer
// exists, which no document, ledger or callback could show.
func (h *handler[T]) refuseGone(ctx context.Context, log *slog.Logger) error {
	h.obs.Attempt(h.kind, ClassJobGone)
	log.WarnContext(ctx, "job record gone: acking its task without running it")
	return nil
}

// refuseSuperseded acks the task of a debounced job that a later submit
// changed, without running it: that submit's task, with the latest body
// and time, runs the job.
func (h *handler[T]) refuseSuperseded(ctx context.Context, log *slog.Logger) error {
	h.obs.Attempt(h.kind, ClassSuperseded)
	log.InfoContext(ctx, "task superseded by a later submit of its debounced job: acking it without running it")
	return nil
}

// unprocessable archives a task whose payload is invalid or names no job.
// There may be no key, so there is no execution state to mark; the job's
// status still says why it failed.
func (h *handler[T]) unprocessable(ctx context.Context, log *slog.Logger, task *asynq.Task, err error) error {
	h.obs.Attempt(h.kind, ClassPermanent)
	h.obs.JobFinished(h.kind, job.StatusFailed)
	// A payload's faults name the tenant's own fields, as the gateway's
	// answer to an invalid submission does; anything else (a Go type that
	// cannot hold the payload) stays in the log.
	reason := "unprocessable payload"
	if pe, ok := errors.AsType[*job.PayloadError](err); ok {
		reason += ": " + pe.Error()
	}
	h.status(ctx, task, "", job.StatusFailed, 0, "", reason)
	log.ErrorContext(ctx, "unprocessable task: archiving", "error", err)
	return fmt.Errorf("workers: %s: %w (%w)", h.kind, Permanent(err), asynq.SkipRetry)
}

// conflict archives a job whose business key belongs to another payload:
// it succeeded, or is running, with different data. The key's own
// execution state is left alone; only this job fails.
func (h *handler[T]) conflict(ctx context.Context, log *slog.Logger, task *asynq.Task, id execID, rec execution.State) error {
	h.obs.Attempt(h.kind, ClassPermanent)
	h.obs.JobFinished(h.kind, job.StatusFailed)
	err := &ConflictError{Task: h.kind, Key: id.key, Status: rec.Status, ResultRef: rec.ResultRef}
	h.status(ctx, task, id.key, job.StatusFailed, 0, "", err.Error())
	log.ErrorContext(ctx, "business key taken by another payload: archiving", "error", err)
	return fmt.Errorf("workers: %w (%w)", Permanent(err), asynq.SkipRetry)
}

// transientBeforeAttempt returns an error met before an attempt was
// counted (PostgreSQL or Redis unreachable): asynq retries with backoff.
func (h *handler[T]) transientBeforeAttempt(ctx context.Context, log *slog.Logger, err error) error {
	h.obs.Attempt(h.kind, ClassTransient)
	log.WarnContext(ctx, "could not start the attempt: will retry", "error", err)
	return fmt.Errorf("workers: %s: %w", h.kind, err)
}
