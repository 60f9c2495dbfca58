package pgstore

// Claims and completions of concurrent requests share one commit.
// Design: docs/design/batching.md compares this batcher with the other two.

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Batching. Every request writes twice (claim, complete), and with
// synchronous_commit each write waits for its own WAL flush: the flush, not
// the statement, sets the pace. The batcher coalesces the claims and
// completions that arrive while other batches are in flight into one round
// trip run as one implicit transaction, so one commit and one WAL flush
// serve them all. Nobody waits for a batch to fill: a caller that finds a
// lane free sends its statement at once, so a lone request goes at once.
//
// A batch runs on the goroutine of one of its callers, which waits for its
// result anyway: the caller that found a lane free leads its own statement,
// and a leader that is done hands the statements queued meanwhile to one of
// their callers, which leads them. So the Store starts no goroutine for
// batching and a Store dropped without Close leaves nothing running.
//
// A result is handed back only after the batch has committed, so a record
// is durable before the response that depends on it is sent, exactly as
// without batching. When a batch fails, its statements were all rolled back
// (a statement failed) or may have committed (the connection was lost at
// commit); either way each caller runs its statement again on its own,
// told which of the two it was, and the statements recognise their own
// earlier write as they do after any lost connection.
//
// Deadlines. A caller waits for its batch only as long as its context
// lets it: then it returns ctx's error, as it would from a statement of
// its own cancelled mid-flight. A statement whose caller has given up
// before its batch holds a connection is dropped, never sent, and a leader
// that gives up before then hands its batch to another of its callers. A
// batch runs under its leader's context, bounded by the batch timeout: one
// context per batch, not a watch on every caller's. A leader that gives up
// once the batch is sent ends it (pgx then gives up a connection that
// stopped answering), and the batch's other callers still waiting run
// their statements again on their own, told that the batch may have
// committed.
//
// Two lanes, not more: with synchronous_commit every batch waits for
// its WAL flush, so fewer batches in flight carry more statements each,
// for fewer commits. Measured with 64 clients on one gateway CPU, against
// four lanes in alternating runs: 0.13-0.15 commits per request
// instead of 0.28, 2,683-3,113 requests/s instead of 2,250-2,853, p99
// 35-44 ms instead of 43-75 ms, and about a tenth less gateway CPU per
// request. One lane did as well on throughput, but a batch held up
// (a row lock, a slow network) would then hold up every other.
const (
	defaultLanes        = 2
	defaultMaxBatch     = 64
	defaultBatchTimeout = 30 * time.Second
)

// WithBatching sets how many batches may be in flight at once (lanes) and
// how many statements one may carry (max). lanes 0 turns batching off:
// every statement is its own round trip and commit.
func WithBatching(lanes, max int) Option {
	return func(s *Store) { s.lanes, s.maxBatch = lanes, max }
}

// WithBatchTimeout bounds a batch's round trip, whatever its leader's
// context allows (default 30s; 0 leaves it to that context), so that a
// connection that stopped answering holds a lane no longer. It matters
// only for leaders without an earlier deadline. When it passes, every
// caller still waiting runs its statement again on its own, under its own
// context.
func WithBatchTimeout(d time.Duration) Option {
	return func(s *Store) { s.batchTimeout = d }
}

// op is one statement waiting for a batch.
type op struct {
	ctx  context.Context // the caller's: the statement is sent only while it is live
	sql  string
	args []any
	// order sorts a batch: statements lock rows in one global order, so two
	// batches never wait for each other in a cycle.
	order idempotency.Scope
	scan  func(pgx.Row) error // a query; nil for an Exec
	tag   pgconn.CommandTag
	err   error // the result, read once wake has said so
	// wake receives nil once err is set, or the batch the caller must now
	// lead. Made only when the op queues (buffered 1): a leader that
	// found its lane free needs none.
	wake chan []*op
	one  [1]*op // the batch of a leader that found its lane free
	// state is 0 while the op waits, leads when its caller was handed a
	// batch to lead, the PostgreSQL backend it was sent to, or gaveUp, set
	// by a caller whose context ended before the statement was sent: the
	// first change wins, so a caller that gives up knows whether its
	// statement may run (see ambiguous.go) and a batch is never handed to
	// a caller that has gone.
	state atomic.Uint32
}

// gaveUp marks an op whose caller gave up before it was sent, and leads
// one whose caller must lead a batch; no backend has either pid.
const (
	gaveUp = ^uint32(0)
	leads  = ^uint32(0) - 1
)

// batchError tells a caller its statement must run again on its own.
// committed is true when the batch may have committed.
type batchError struct {
	err       error
	committed bool
}

func (e *batchError) Error() string { return "pgstore: batch: " + e.err.Error() }
func (e *batchError) Unwrap() error { return e.err }

type batcher struct {
	pool    *pgxpool.Pool
	lanes   int
	max     int
	timeout time.Duration // 0: none

	mu      sync.Mutex
	busy    int   // batches in flight, or being led
	pending []*op // waiting for a lane

	// What went out: statements and the batches (round trips, commits)
	// that carried them.
	statements, batches atomic.Int64
}

func newBatcher(pool *pgxpool.Pool, lanes, max int, timeout time.Duration) *batcher {
	return &batcher{pool: pool, lanes: lanes, max: max, timeout: timeout}
}

// do runs o in a batch and returns its error once the batch has
// committed, or ctx's error as soon as ctx ends; then sentTo(o) says
// whether the statement was sent (a pid) or not (0).
func (b *batcher) do(ctx context.Context, o *op) error {
	o.ctx = ctx
	b.mu.Lock()
	if b.busy < b.lanes {
		b.busy++
		b.mu.Unlock()
		o.one[0] = o
		b.lead(o, o.one[:])
		return o.err
	}
	o.wake = make(chan []*op, 1)
	b.pending = append(b.pending, o)
	b.mu.Unlock()
	select {
	case batch := <-o.wake:
		if batch != nil {
			b.lead(o, batch)
		}
		return o.err
	case <-ctx.Done():
	}
	if o.state.CompareAndSwap(0, gaveUp) {
		// Queued, or in a batch not yet sent: the statement is dropped.
		return ctx.Err()
	}
	switch o.state.Load() {
	case gaveUp: // a leader found the context ended first
		return ctx.Err()
	case leads:
		// Handed a batch as the context ended: lead hands it on.
		b.lead(o, <-o.wake)
		return ctx.Err()
	}
	select {
	case <-o.wake: // the result came with the deadline: it stands
		return o.err
	default:
		// Sent, it may still run and commit: sentTo(o) names the
		// backend, so the caller can settle what became of it.
		return ctx.Err()
	}
}

// lead runs batch, which holds self, on self's goroutine and then hands
// the lane on (handOff). When self's caller has gone before the batch is
// sent, it hands the batch to another of its callers instead.
func (b *batcher) lead(self *op, batch []*op) {
	if b.run(self, batch) {
		b.handOff()
	}
}

// handOff ends a lead: it hands the lane, with the statements queued
// meanwhile, to one of their callers that is still waiting, or takes the
// lane back when nobody is.
func (b *batcher) handOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.pending) > 0 {
		n := min(len(b.pending), b.max)
		next := slices.Clone(b.pending[:n])
		b.pending = slices.Delete(b.pending, 0, n)
		if pass(next) {
			return
		}
	}
	b.busy--
}

// pass hands batch to the first of its callers still waiting, reporting
// false when they have all gone.
func pass(batch []*op) bool {
	for _, o := range batch {
		if o.state.CompareAndSwap(0, leads) {
			o.wake <- batch
			return true
		}
	}
	return false
}

// run sends batch as one round trip and hands each caller its result. It
// reports false when it passed the batch, and with it the lane, to another
// of its callers because self's had gone before the batch was sent.
func (b *batcher) run(self *op, batch []*op) bool {
	if len(batch) > 1 {
		slices.SortStableFunc(batch, func(x, y *op) int { return compareScopes(x.order, y.order) })
	}
	batch = waiting(self, batch)
	if self.ctx.Err() != nil {
		self.err = self.ctx.Err()
		return len(batch) == 0 || !pass(batch)
	}
	ctx, cancel := b.context(self.ctx)
	defer cancel()
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		switch {
		case self.ctx.Err() != nil:
			// Self gave up waiting for a connection: nothing was sent,
			// and the others may still go together.
			self.err = self.ctx.Err()
			return !pass(waiting(self, batch))
		case len(batch) == 1 && ctx.Err() == nil:
			self.err = err // the statement's own error, as in send
		default:
			// Nothing was sent (or the batch timeout passed first):
			// each caller still waiting runs its statement on its own,
			// under its own context.
			deliver(self, batch, nil, &batchError{err: err})
		}
		return true
	}
	defer conn.Release()
	// Nothing but this stands between the statements and the wire now.
	// Self goes first: a batch handed on must hold no op marked sent.
	if batch = waiting(self, batch); self.ctx.Err() != nil {
		self.err = self.ctx.Err()
		return len(batch) == 0 || !pass(batch)
	}
	batch = sending(self, batch, conn.Conn().PgConn().PID())
	b.statements.Add(int64(len(batch)))
	b.batches.Add(1)
	results, err := send(ctx, conn, batch)
	if err != nil && self.ctx.Err() != nil {
		// Self gave up mid-flight, as it would have on its own; the
		// others learn that the batch may have committed.
		deliver(self, batch, nil, err)
		self.err = self.ctx.Err()
		return true
	}
	deliver(self, batch, results, err)
	return true
}

// deliver sets each op's result, results[i] or err when not nil, and wakes
// every caller but self's.
func deliver(self *op, batch []*op, results []error, err error) {
	for i, o := range batch {
		if err != nil {
			o.err = err
		} else {
			o.err = results[i]
		}
		if o != self {
			o.wake <- nil
		}
	}
}

// waiting returns the ops of batch whose callers are still waiting,
// reusing batch. Self stays while its caller waits; the others' callers
// return on their own.
func waiting(self *op, batch []*op) []*op {
	return slices.DeleteFunc(batch, func(o *op) bool {
		return gone(o, o == self)
	})
}

// gone marks o given up when its caller's context has ended, so that it is
// never sent, and reports whether it was given up. A leader's op (lead)
// is in state leads or 0.
func gone(o *op, lead bool) bool {
	if o.ctx.Err() != nil {
		if lead {
			o.state.Store(gaveUp)
			return true
		}
		o.state.CompareAndSwap(0, gaveUp)
	}
	return o.state.Load() == gaveUp
}

// sending marks the ops of batch as sent to the backend pid and returns
// them, reusing batch, without those whose callers have given up. Self,
// the leader's, is sent whatever its context says by now: a leader that
// gives up from here on ends the batch (run).
func sending(self *op, batch []*op, pid uint32) []*op {
	return slices.DeleteFunc(batch, func(o *op) bool {
		if o == self {
			o.state.Store(pid)
			return false
		}
		if o.ctx.Err() != nil {
			o.state.CompareAndSwap(0, gaveUp)
		}
		return !o.state.CompareAndSwap(0, pid)
	})
}

// context is what a batch led by a caller whose context is parent runs
// under: parent, bounded by the batch timeout. A parent whose deadline
// comes first serves as it is, with no timer of the batch's own.
func (b *batcher) context(parent context.Context) (context.Context, context.CancelFunc) {
	if b.timeout <= 0 {
		return parent, func() {}
	}
	if d, ok := parent.Deadline(); ok && time.Until(d) <= b.timeout {
		return parent, func() {}
	}
	return context.WithTimeout(parent, b.timeout)
}

// send runs ops on conn under ctx. Results are read in full, and the batch
// closed (which returns after the commit), before any is handed back. A
// non-nil error means no statement's result stands.
func send(ctx context.Context, conn *pgxpool.Conn, ops []*op) ([]error, error) {
	var batch pgx.Batch
	for _, o := range ops {
		batch.Queue(o.sql, o.args...)
	}
	br := conn.SendBatch(ctx, &batch)
	results := make([]error, len(ops))
	var failed error
	for i, o := range ops {
		if o.scan != nil {
			results[i] = o.scan(br.QueryRow())
		} else {
			o.tag, results[i] = br.Exec()
		}
		if results[i] != nil && !errors.Is(results[i], pgx.ErrNoRows) && failed == nil {
			failed = results[i]
		}
	}
	closeErr := br.Close()
	switch {
	case failed == nil && closeErr == nil:
		return results, nil
	case ctx.Err() != nil:
		// The batch was given up (its callers gone, or its timeout
		// passed), maybe after the commit: callers still waiting run
		// their statements again on their own.
		return nil, &batchError{err: errors.Join(failed, closeErr), committed: true}
	case len(ops) == 1:
		// A batch of one is the statement on its own: its error is the
		// statement's, handled as such.
		return nil, cmp.Or(failed, closeErr)
	case failed != nil && !connLost(failed):
		// A statement failed: the implicit transaction rolled back.
		return nil, &batchError{err: failed}
	default:
		// The connection was lost, maybe after the commit.
		return nil, &batchError{err: errors.Join(failed, closeErr), committed: true}
	}
}
