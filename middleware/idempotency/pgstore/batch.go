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
)

// Batching. Every request writes twice (claim, complete), and with
// synchronous_commit each write waits for its own WAL flush: the flush, not
// the statement, sets the pace. The batcher coalesces the claims and
// completions that arrive while another batch is in flight into one round
// trip run as one implicit transaction, so one commit and one WAL flush
// serve them all. Nobody waits for a batch to fill: a flusher takes what is
// queued the moment it is free, so a lone request goes at once.
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
// before its batch holds a connection is dropped, never sent. A batch runs
// under a context that ends when every one of its callers has given up
// (nobody would read its results, and pgx then gives up a connection that
// stopped answering) or when the batch timeout passes, whichever is first,
// so a flusher is never held for longer by a network that stopped
// answering.
//
// Two flushers, not more: with synchronous_commit every batch waits for
// its WAL flush, so fewer batches in flight carry more statements each,
// for fewer commits. Measured with 64 clients on one gateway CPU, against
// four flushers in alternating runs: 0.13-0.15 commits per request
// instead of 0.28, 2,683-3,113 requests/s instead of 2,250-2,853, p99
// 35-44 ms instead of 43-75 ms, and about a tenth less gateway CPU per
// request. One flusher did as well on throughput, but a batch held up
// (a row lock, a slow network) would then hold up every other.
const (
	defaultFlushers     = 2
	defaultMaxBatch     = 64
	defaultBatchTimeout = 30 * time.Second
)

// WithBatching sets how many batches may be in flight at once (flushers)
// and how many statements one may carry (max). flushers 0 turns batching
// off: every statement is its own round trip and commit.
func WithBatching(flushers, max int) Option {
	return func(s *Store) { s.flushers, s.maxBatch = flushers, max }
}

// WithBatchTimeout bounds a batch's round trip, whatever its callers'
// contexts allow (default 30s; 0 leaves it to them), so that a connection
// that stopped answering holds a flusher no longer. It matters only for
// callers without a deadline, since a batch ends when all of its callers
// have given up. When it passes, every caller still waiting runs its
// statement again on its own, under its own context.
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
	order string
	scan  func(pgx.Row) error // a query; nil for an Exec
	tag   pgconn.CommandTag
	done  chan error // buffered 1
	// backend is the PostgreSQL backend the statement was sent to, set
	// by the flusher just before sending it, or gaveUp, set by a caller
	// whose context ended while the statement was still queued: whichever
	// comes first wins, so a caller that gives up knows whether its
	// statement may run (see ambiguous.go).
	backend atomic.Uint32
}

// gaveUp marks an op whose caller gave up before it was sent; no backend
// has that pid.
const gaveUp = ^uint32(0)

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
	queue   chan *op
	max     int
	timeout time.Duration // 0: none

	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup

	// What went out: statements and the batches (round trips, commits)
	// that carried them.
	statements, batches atomic.Int64
}

func newBatcher(pool *pgxpool.Pool, flushers, max int, timeout time.Duration) *batcher {
	b := &batcher{pool: pool, queue: make(chan *op, flushers*max), max: max, timeout: timeout}
	for range flushers {
		b.wg.Go(b.flush)
	}
	return b
}

// do runs o in a batch and returns its error once the batch has
// committed, or ctx's error as soon as ctx ends; then o.backend says
// whether the statement was sent (a pid) or not (gaveUp). It reports
// false, running nothing, when the batcher is closed.
func (b *batcher) do(ctx context.Context, o *op) (error, bool) {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return nil, false
	}
	o.ctx = ctx
	o.done = make(chan error, 1)
	select {
	case b.queue <- o:
	case <-ctx.Done():
		b.mu.RUnlock()
		o.backend.Store(gaveUp)
		return ctx.Err(), true
	}
	b.mu.RUnlock()
	select {
	case err := <-o.done:
		return err, true
	case <-ctx.Done():
		select {
		case err := <-o.done: // the result came with the deadline: it stands
			return err, true
		default:
		}
		// Still queued, the statement is dropped (run). Sent, it may
		// still run and commit: o.backend names the backend, so the
		// caller can settle what became of it.
		o.backend.CompareAndSwap(0, gaveUp)
		return ctx.Err(), true
	}
}

// close stops the flushers once every queued statement has run.
func (b *batcher) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *batcher) flush() {
	ops := make([]*op, 0, b.max)
	for first := range b.queue {
		ops = append(ops[:0], first)
	drain:
		for len(ops) < b.max {
			select {
			case o, ok := <-b.queue:
				if !ok {
					break drain
				}
				ops = append(ops, o)
			default:
				break drain
			}
		}
		b.run(ops)
	}
}

// run sends ops as one batch and hands each its result.
func (b *batcher) run(ops []*op) {
	if len(ops) > 1 {
		slices.SortStableFunc(ops, func(x, y *op) int { return cmp.Compare(x.order, y.order) })
	}
	if ops = waiting(ops); len(ops) == 0 {
		return
	}
	ctx, cancel := b.context(ops)
	defer cancel()
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		if len(ops) == 1 && ctx.Err() == nil {
			ops[0].done <- err // the statement's own error, as in send
			return
		}
		// Nothing was sent: each caller still waiting runs its
		// statement on its own, under its own context.
		for _, o := range ops {
			o.done <- &batchError{err: err}
		}
		return
	}
	defer conn.Release()
	// Nothing but this stands between the statements and the wire now.
	if ops = sending(ops, conn.Conn().PgConn().PID()); len(ops) == 0 {
		return
	}
	b.statements.Add(int64(len(ops)))
	b.batches.Add(1)
	results, err := send(ctx, conn, ops)
	for i, o := range ops {
		if err != nil {
			o.done <- err
			continue
		}
		o.done <- results[i]
	}
}

// waiting hands ops whose callers have given up their context's error, so
// that they are never sent, and returns the others, reusing ops.
func waiting(ops []*op) []*op {
	return slices.DeleteFunc(ops, func(o *op) bool {
		if err := o.ctx.Err(); err != nil {
			o.done <- err
			return true
		}
		return false
	})
}

// sending marks ops as sent to the backend pid and returns them, reusing
// ops, without those whose callers have given up (handed their context's
// error when still waiting for it).
func sending(ops []*op, pid uint32) []*op {
	return slices.DeleteFunc(ops, func(o *op) bool {
		if err := o.ctx.Err(); err != nil {
			if o.backend.CompareAndSwap(0, gaveUp) {
				o.done <- err
			}
			return true
		}
		return !o.backend.CompareAndSwap(0, pid)
	})
}

// context is what a batch of ops runs under: a context that ends when
// every caller's has ended, or when the batch timeout passes. A batch of
// one runs under its caller's context, bounded by the timeout.
func (b *batcher) context(ops []*op) (context.Context, context.CancelFunc) {
	withTimeout := func(parent context.Context) (context.Context, context.CancelFunc) {
		if b.timeout > 0 {
			return context.WithTimeout(parent, b.timeout)
		}
		return context.WithCancel(parent)
	}
	if len(ops) == 1 {
		return withTimeout(ops[0].ctx)
	}
	ctx, cancel := withTimeout(context.Background())
	var left atomic.Int64
	left.Store(int64(len(ops)))
	stops := make([]func() bool, len(ops))
	for i, o := range ops {
		stops[i] = context.AfterFunc(o.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
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
