package execution

// The Takes and MarkSucceededs of concurrent jobs share one commit.
// Design: docs/design/batching.md compares this batcher with the other two.

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group commit. A writer learns its result only after its batch has
// committed, so batching never changes what a caller is told has committed.
// A batch runs on the goroutine of the writer that leads it, so there is
// nothing to close. Statements are sorted by job, so two batches lock jobs
// in the same order. A failed batch runs each statement again on its own.
// Design: docs/design/batching.md#group-commit-in-the-execution-store

// Defaults for WithBatching.
const (
	DefaultBatchLanes = 2
	DefaultBatchMax   = 32
	// batchTimeout bounds a batch's round trip whatever its writers'
	// contexts allow; a writer still waiting then runs its statement on its
	// own, under its own context.
	batchTimeout = 10 * time.Second
)

// Sender runs a pgx batch: *pgxpool.Pool satisfies it.
type Sender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Option adjusts a Store.
type Option func(*Store)

// WithBatching makes the hot-path writes (Take and MarkSucceeded) of
// concurrent callers share commits: at most lanes batches in flight, each
// of at most max statements. It needs a DB that is also a Sender and safe
// for concurrent use, such as a *pgxpool.Pool; on a DB that is not a
// Sender it is ignored. lanes 0 turns batching off.
func WithBatching(lanes, maxBatch int) Option {
	return func(s *Store) {
		sender, ok := s.db.(Sender)
		if !ok || lanes <= 0 {
			s.batch = nil
			return
		}
		s.batch = &committer{db: s.db, sender: sender, lanes: lanes, max: max(maxBatch, 1)}
	}
}

// Queued first in every batch, local to its implicit transaction (the
// connection keeps its own settings):
//
//   - batchSettingsSQL gives the batch's statements their generic plan at
//     once. They are point writes whose generic plan PostgreSQL settles on
//     after five custom ones per connection anyway; each of those five
//     costs several milliseconds of planning for the take's ten CTEs over
//     the jobs table's indexes, a quarter of PostgreSQL's CPU per job in
//     a run of a few thousand jobs on a fresh pool (BENCHMARKS.md). It
//     also bounds the batch's wait for a row lock (batchLockTimeout): a
//     statement that waits for one (a newer attempt's take behind an
//     older attempt's open transaction, a cancel) fails the batch, which
//     frees its lane, and waits again on its own, as long as it takes,
//     while the lane carries the other writers' batches;
//   - flushLaterSQL adds synchronous_commit off: the batch's commit
//     returns before its WAL flush (Attempt.FlushLater).
const (
	batchSettingsSQL = `SELECT ` + genericPlans + `, set_config('lock_timeout', '` + batchLockTimeout + `', true)`
	flushLaterSQL    = batchSettingsSQL + `, set_config('synchronous_commit', 'off', true)`
	batchLockTimeout = "1s"

	// genericPlans is the setting that gives a transaction's statements
	// their generic plan (batchSettingsSQL, genericPlansSQL).
	genericPlans = `set_config('plan_cache_mode', 'force_generic_plan', true)`
)

// write is one statement of a batch that returns one row.
type write struct {
	ctx   context.Context
	sql   string
	args  []any
	order string
	scan  func(pgx.Row) error
	// flushLater: the write's commit need not wait for its WAL flush
	// (Attempt.FlushLater). A batch skips the wait only when all of its
	// writes allow it.
	flushLater bool

	err   error // the scan's error, once done
	again bool  // the batch failed: run the statement on its own
	// next receives nil once err is set, or the batch this write's
	// goroutine must now lead (it contains the write).
	next chan []*write
}

type committer struct {
	db     DB
	sender Sender
	lanes  int
	max    int

	mu      sync.Mutex
	busy    int      // batches in flight
	pending []*write // waiting for a lane
}

// do runs w, batched with the writes of other callers, and returns its
// scan's error once the batch that carried it has committed.
func (c *committer) do(w *write) error {
	w.next = make(chan []*write, 1)
	c.mu.Lock()
	if c.busy < c.lanes {
		c.busy++
		c.mu.Unlock()
		c.lead([]*write{w})
	} else {
		c.pending = append(c.pending, w)
		c.mu.Unlock()
		if batch := <-w.next; batch != nil {
			c.lead(batch)
		}
	}
	if w.again {
		// On its own, the write waits for its flush: the batch's failure
		// may have been the connection's, and nothing is lost by waiting.
		w.err = w.scan(c.db.QueryRow(w.ctx, w.sql, w.args...))
	}
	return w.err
}

// lead runs batch, then either takes the lane back or hands it, with the
// writes queued meanwhile, to the first of their writers.
func (c *committer) lead(batch []*write) {
	defer c.handOff()
	c.run(batch)
}

// handOff ends a lead: it takes the lane back, or hands it, with the writes
// queued meanwhile, to the first of their writers. Deferred, so that a lane
// is never lost, even to a panic.
func (c *committer) handOff() {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.busy--
		c.mu.Unlock()
		return
	}
	n := min(len(c.pending), c.max)
	next := slices.Clone(c.pending[:n])
	c.pending = slices.Delete(c.pending, 0, n)
	c.mu.Unlock()
	next[0].next <- next
}

// run sends batch as one round trip and one transaction, sets every
// write's err (or again, when the batch failed) and wakes every writer but
// the one running it, which reads its own result when lead returns.
func (c *committer) run(batch []*write) {
	self := batch[0]
	if len(batch) == 1 && !self.flushLater {
		// Bounded like a batch: the writes queued behind this lane wait
		// for it.
		ctx, cancel := context.WithTimeout(self.ctx, batchTimeout)
		defer cancel()
		self.err = self.scan(c.db.QueryRow(ctx, self.sql, self.args...))
		return
	}
	woken := false
	defer func() {
		if !woken { // a panic: nobody may be left waiting
			for _, w := range batch {
				if w != self {
					w.again = true
					w.next <- nil
				}
			}
		}
	}()
	slices.SortStableFunc(batch, func(a, b *write) int { return cmp.Compare(a.order, b.order) })
	ctx, cancel := context.WithTimeout(context.WithoutCancel(self.ctx), batchTimeout)
	var b pgx.Batch
	if slices.ContainsFunc(batch, func(w *write) bool { return !w.flushLater }) {
		b.Queue(batchSettingsSQL)
	} else {
		b.Queue(flushLaterSQL)
	}
	for _, w := range batch {
		b.Queue(w.sql, w.args...).QueryRow(func(row pgx.Row) error {
			w.err = w.scan(row)
			if errors.Is(w.err, pgx.ErrNoRows) {
				return nil // the statement's own answer, not a failure
			}
			return w.err
		})
	}
	err := c.sender.SendBatch(ctx, &b).Close()
	cancel()
	woken = true
	for _, w := range batch {
		w.again = err != nil
		if w != self {
			w.next <- nil
		}
	}
}
