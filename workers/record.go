package workers

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
)

// A succeeded effect's record (MarkSucceeded) is retried in place, not the
// effect. It retries while the lease holds, until a stale-token answer, and for
// at most recordRetryTTLs lock TTLs. Then the task is retried as before.
// Design: docs/design/recording.md

// recordRetryTTLs bounds the record's retries, in lock TTLs: long enough
// to ride out a database failover (seconds), short enough that a store
// that stays down hands the job back to the queue well before a human
// would notice the worker stuck.
const recordRetryTTLs = 3

// Backoff of the record's retries: from recordRetryFirst, doubled after
// each failure, at most recordRetryMax (and a third of the lock TTL), with
// full jitter on each pause so workers that failed together do not retry
// in step.
const (
	recordRetryFirst = 50 * time.Millisecond
	recordRetryMax   = 2 * time.Second
)

// recordFinal reports whether an error of MarkSucceeded is an answer
// rather than a failure to reach the store: a newer token owns the job,
// or the job is no longer processing (a cancel released it). Retrying
// cannot change either.
func recordFinal(err error) bool {
	return errors.Is(err, fence.ErrStaleToken) || errors.Is(err, execution.ErrNotProcessing) ||
		errors.Is(err, execution.ErrSucceeded)
}

// recordSuccess records that the attempt's effect succeeded with ref:
// the execution state, its ledger row and the job's document, in one
// statement (execution.Store.MarkSucceeded), retried as the comment above
// says. It returns nil once that has committed, and the error that
// retries the task otherwise.
func (r *run[T]) recordSuccess(ctx context.Context, ref string) error {
	h := r.h
	lctx := r.lease.Context()
	ttl := h.locker.TTL()
	deadline := time.Now().Add(recordRetryTTLs * ttl)
	pause := recordRetryFirst
	maxPause := min(recordRetryMax, max(ttl/3, recordRetryFirst))
	// wait sleeps one backoff step; false when the lease ended or the
	// bound would pass during it.
	wait := func() bool {
		d := time.Duration(mathrand.Int64N(int64(pause)) + 1)
		pause = min(2*pause, maxPause)
		if time.Now().Add(d).After(deadline) {
			return false
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-lctx.Done():
			return false
		case <-t.C:
			return lctx.Err() == nil
		}
	}

	for tries := 1; ; tries++ {
		fctx, cancel := finishContext(ctx)
		err := h.store.MarkSucceeded(fctx, r.id.tenant, r.id.key, r.token, ref)
		cancel()
		if err == nil {
			if tries > 1 {
				r.log.InfoContext(ctx, "success recorded after retrying", "tries", tries)
			}
			break
		}
		if lost := r.lost(ctx, err, execution.OutcomeStaleToken); lost != nil {
			return lost
		}
		if recordFinal(err) || !wait() {
			if lost := r.lost(ctx, err, execution.OutcomeStaleToken); lost != nil {
				return lost
			}
			// The effect happened but is not recorded: the next attempt
			// runs the idempotent effect again, under a higher token, and
			// records it. Never a verdict of failure for a job whose
			// effect may be done.
			h.obs.Attempt(h.kind, ClassTransient)
			r.log.ErrorContext(ctx, "recording the success failed: will retry the attempt", "error", err, "tries", tries)
			return fmt.Errorf("workers: %s %s: record success: %w", h.kind, r.id.key, err)
		}
		h.obs.RecordRetried(h.kind)
		r.log.WarnContext(ctx, "recording the success failed: retrying the record, not the effect", "error", err, "tries", tries)
	}

	// The job document was written by the same statement.
	h.report(ctx, r.task, r.id.key, job.StatusSucceeded, r.attempts, ref, "", true)
	return nil
}
