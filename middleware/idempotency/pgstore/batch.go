package pgstore

// Why this is not redisstore's pipelining (../redisstore/pipeline.go),
// which solves the same problem — many concurrent claims and completions
// sharing one round trip: here what is shared is a commit. A batch is one
// transaction with one WAL flush, sorted into one lock order so two
// batches cannot deadlock, and it stands or falls as a whole, so a failed
// batch makes each caller run its statement again on its own, told whether
// the batch may have committed. Its flushers are goroutines the Store owns
// and Close stops. Redis has no commit to share: each script is atomic on
// its own, one script's error is only its own, and the only retry follows
// a NOSCRIPT answer. One mechanism for both would carry both failure models.

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

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
const (
	defaultFlushers = 4
	defaultMaxBatch = 64
)

// WithBatching sets how many batches may be in flight at once (flushers)
// and how many statements one may carry (max). flushers 0 turns batching
// off: every statement is its own round trip and commit.
func WithBatching(flushers, max int) Option {
	return func(s *Store) { s.flushers, s.maxBatch = flushers, max }
}

// op is one statement waiting for a batch.
type op struct {
	sql  string
	args []any
	// order sorts a batch: statements lock rows in one global order, so two
	// batches never wait for each other in a cycle.
	order string
	scan  func(pgx.Row) error // a query; nil for an Exec
	tag   pgconn.CommandTag
	done  chan error // buffered 1
}

// batchError tells a caller its statement must run again on its own.
// committed is true when the batch may have committed.
type batchError struct {
	err       error
	committed bool
}

func (e *batchError) Error() string { return "pgstore: batch: " + e.err.Error() }
func (e *batchError) Unwrap() error { return e.err }

type batcher struct {
	pool  *pgxpool.Pool
	queue chan *op
	max   int

	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup

	// What went out: statements and the batches (round trips, commits)
	// that carried them.
	statements, batches atomic.Int64
}

func newBatcher(pool *pgxpool.Pool, flushers, max int) *batcher {
	b := &batcher{pool: pool, queue: make(chan *op, flushers*max), max: max}
	for range flushers {
		b.wg.Go(b.flush)
	}
	return b
}

// do runs o in a batch and returns its error once the batch has
// committed. It reports false, running nothing, when the batcher is
// closed.
func (b *batcher) do(ctx context.Context, o *op) (error, bool) {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return nil, false
	}
	o.done = make(chan error, 1)
	select {
	case b.queue <- o:
	case <-ctx.Done():
		b.mu.RUnlock()
		return ctx.Err(), true
	}
	b.mu.RUnlock()
	select {
	case err := <-o.done:
		return err, true
	case <-ctx.Done():
		// The statement may still run and commit; the caller gives up
		// on knowing, as it would on a statement cancelled mid-flight.
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
	b.statements.Add(int64(len(ops)))
	b.batches.Add(1)
	results, err := b.send(ops)
	for i, o := range ops {
		if err != nil {
			o.done <- err
			continue
		}
		o.done <- results[i]
	}
}

// send runs ops. Results are read in full, and the batch closed (which
// returns after the commit), before any is handed back. A non-nil error
// means no statement's result stands.
func (b *batcher) send(ops []*op) ([]error, error) {
	var batch pgx.Batch
	for _, o := range ops {
		batch.Queue(o.sql, o.args...)
	}
	// The batch runs to completion whatever its callers' contexts do:
	// cancelling it midway would leave them unsure what committed.
	br := b.pool.SendBatch(context.Background(), &batch)
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
	case len(ops) == 1 && (failed != nil || closeErr != nil):
		// A batch of one is the statement on its own: its error is the
		// statement's, handled as such.
		return nil, cmp.Or(failed, closeErr)
	case failed != nil && !connLost(failed):
		// A statement failed: the implicit transaction rolled back.
		return nil, &batchError{err: failed}
	case failed != nil || closeErr != nil:
		return nil, &batchError{err: errors.Join(failed, closeErr), committed: true}
	}
	return results, nil
}
