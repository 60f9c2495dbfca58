package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
)

// ErrJobCancelled is the cause of a Go handler's context cancelled because
// its job was cancelled (POST /v1/jobs/{id}/cancel): context.Cause(ctx)
// returns it.
var ErrJobCancelled = errors.New("workers: job cancelled")

// CancelCheck returns which of the job ids it is given are being
// cancelled. job.Store.Cancelling is one.
type CancelCheck func(ctx context.Context, ids []string) ([]string, error)

// DefaultCancelInterval is how often a CancelWatcher asks, while jobs are
// in flight.
const DefaultCancelInterval = time.Second

// CancelWatcher stops the attempts whose job is cancelled while they run.
// One per worker process: every handler of the process registers its
// attempts in flight with it (Deps.Cancels), and its one goroutine (Run,
// which WithCancelWatcher makes the Server run and wait for) asks check,
// every interval and only while attempts are in flight, which of their
// jobs are being cancelled: one query for all of them, never one per job.
// The context of a Go handler whose job is cancelled is cancelled with
// ErrJobCancelled. An HTTP delivery in flight is not aborted: the
// receiver's answer decides the job.
type CancelWatcher struct {
	check    CancelCheck
	interval time.Duration
	logger   *slog.Logger

	mu       sync.Mutex
	inflight map[string][]*watched // by job id
}

// watched is one attempt in flight.
type watched struct {
	// cancel stops the attempt; nil for an attempt that is not aborted
	// (an HTTP delivery).
	cancel    context.CancelCauseFunc
	requested atomic.Bool
}

// NewCancelWatcher returns a watcher that asks check every interval
// (DefaultCancelInterval when 0 or less). logger receives a failed check
// (nil: discarded).
func NewCancelWatcher(check CancelCheck, interval time.Duration, logger *slog.Logger) *CancelWatcher {
	if interval <= 0 {
		interval = DefaultCancelInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &CancelWatcher{check: check, interval: interval, logger: logger, inflight: map[string][]*watched{}}
}

// Run checks the attempts in flight until ctx ends.
func (w *CancelWatcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.checkOnce(ctx)
	}
}

// checkOnce asks about every job in flight and stops the cancelled ones.
func (w *CancelWatcher) checkOnce(ctx context.Context) {
	w.mu.Lock()
	ids := make([]string, 0, len(w.inflight))
	for id := range w.inflight {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	cctx, cancel := context.WithTimeout(ctx, max(w.interval, time.Second))
	cancelled, err := w.check(cctx, ids)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.logger.WarnContext(ctx, "cancel watcher: check failed; the next one tries again", "jobs", len(ids), "error", err)
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range cancelled {
		for _, a := range w.inflight[id] {
			a.stop()
		}
	}
}

func (a *watched) stop() {
	a.requested.Store(true)
	if a.cancel != nil {
		a.cancel(ErrJobCancelled)
	}
}

// watch registers an attempt of job id in flight; cancel, if not nil,
// stops it. The returned function unregisters it.
func (w *CancelWatcher) watch(id string, cancel context.CancelCauseFunc) (*watched, func()) {
	a := &watched{cancel: cancel}
	w.mu.Lock()
	w.inflight[id] = append(w.inflight[id], a)
	w.mu.Unlock()
	return a, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		rest := slices.DeleteFunc(w.inflight[id], func(b *watched) bool { return b == a })
		if len(rest) == 0 {
			delete(w.inflight, id)
		} else {
			w.inflight[id] = rest
		}
	}
}

// requested reports whether job id's cancel has been asked for: known to
// the watcher already, or, since an attempt may end between two checks,
// asked of check now. A check that fails reports false: the attempt's end
// is recorded as it would be without a cancel, and the job's record turns
// a cancelling job's retrying or failed into cancelled all the same.
func (w *CancelWatcher) requested(ctx context.Context, id string, a *watched) bool {
	if a != nil && a.requested.Load() {
		return true
	}
	found, err := w.check(ctx, []string{id})
	if err != nil {
		w.logger.WarnContext(ctx, "cancel watcher: check failed", "job_id", id, "error", err)
		return false
	}
	return slices.Contains(found, id)
}

// WithCancelWatcher makes the Server run w, the watcher its handlers'
// Deps.Cancels names, for as long as it runs, and wait for it.
func WithCancelWatcher(w *CancelWatcher) ServerOption {
	return func(s *Server) { s.cancels = w }
}

// The attempts of a cancelled job: a delivery refused before it started,
// and an attempt that did not succeed after its job was cancelled.

// cancelRequested reports whether the job of an attempt that did not
// succeed was cancelled while it ran.
func (r *run[T]) cancelRequested(ctx context.Context) bool {
	jobID := r.task.Headers()[job.HeaderID]
	if jobID == "" || r.h.cancels == nil {
		return false
	}
	return r.h.cancels.requested(ctx, jobID, r.watched)
}

// cancelled ends an attempt that did not succeed after its job was
// cancelled: the execution and the ledger row end cancelled, saying how
// (the context cancelled, the write fenced out by the cancel's token, no
// answer from the receiver), the job cancelled, and the task is acked.
func (r *run[T]) cancelled(ctx, fctx context.Context, err error) error {
	h := r.h
	how, reason := cancelledHow(err)
	if merr := h.store.MarkCancelled(fctx, r.id.tenant, r.id.key, r.token, how+": "+err.Error()); merr != nil {
		if lost := r.lost(ctx, merr, execution.OutcomeStaleToken); lost != nil {
			return lost
		}
		// Not recorded: the retry's take finds the job cancelled and ends
		// it.
		h.obs.Attempt(h.kind, ClassTransient)
		r.log.WarnContext(ctx, "recording the cancel failed: will retry", "error", merr, "cause", err)
		return fmt.Errorf("workers: %s %s: record cancel: %w", h.kind, r.id.key, errors.Join(merr, err))
	}
	if errors.Is(err, fence.ErrStaleToken) {
		h.obs.FencingRejected()
	}
	h.obs.Attempt(h.kind, ClassCancelled)
	h.obs.JobFinished(h.kind, job.StatusCancelled)
	h.status(fctx, r.task, r.id.key, job.StatusCancelled, r.attempts, "", reason)
	r.log.InfoContext(ctx, "job cancelled while its attempt ran: acking", "how", how, "error", err)
	return nil
}

// cancelledHow says how an attempt a cancel stopped ended: in the ledger
// (how) and to the job's tenant (reason).
func cancelledHow(err error) (how, reason string) {
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		return execution.CancelledFenced, reasonCancelled
	case unanswered(err):
		return execution.CancelledNoAnswer, reasonNoAnswer
	}
	return execution.CancelledStopped, reasonCancelled
}

// refuseCancelled acks a delivery of a job cancelled before it could
// start: the take refused it and released the key. The job's record says
// cancelled (a cancelling job whose attempt never recorded its end is
// cancelled now).
func (h *handler[T]) refuseCancelled(ctx context.Context, log *slog.Logger, task *asynq.Task, id execID) error {
	h.obs.Attempt(h.kind, ClassCancelled)
	h.status(ctx, task, id.key, job.StatusCancelled, 0, "", "")
	log.InfoContext(ctx, "job cancelled: acking the delivery without an attempt")
	return nil
}
