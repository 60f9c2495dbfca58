package execution

// Why this is not pgstore's batcher (middleware/idempotency/pgstore/batch.go),
// which shares commits among concurrent writes the same way: pipelined
// statements in one implicit transaction, sorted into one lock order, each
// run again on its own when the batch fails. Two things differ, and each
// decides the design.
//
// Who owns a goroutine. pgstore's batches run on flushers that the Store
// owns and its Close stops. A Store here has no lifecycle: workers.Handle
// makes one inside an asynq.Handler, which has no Close, and explain and
// the attempt janitor make their own. Flushers would have no owner, so a
// batch runs on the goroutine of a writer that is waiting anyway.
//
// Who may leave early. A gateway request has a deadline its client is
// waiting on: pgstore's caller returns the moment its context ends, and a
// statement whose caller has gone is never sent. A writer that leads a
// batch here cannot leave it, since the others' results depend on it, so
// every writer waits for its batch (bounded by batchTimeout). That suits a
// job: its writes are the fenced steps of an attempt that holds the lock,
// and nothing answers a client in between.
//
// What a failure tells the caller is the same in effect: pgstore says
// whether a failed batch may have committed because a claim run again must
// know; both statements batched here recognise an earlier run of their own
// (see below), so the answer would change nothing. One mechanism for both
// would give the worker framework goroutines with no owner, or make the
// gateway outwait its clients' deadlines.

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group commit. A job writes twice (Take, then MarkSucceeded), and with
// synchronous_commit each write waits for its own WAL flush. When
// concurrent jobs write at the same moment, the writes that arrive while
// every lane is busy go out together, as one pipelined round trip run as
// one implicit transaction: one commit and one WAL flush for all of them.
// Nobody waits for a batch to fill: a writer that finds a free lane sends
// at once, so a lone job's writes are exactly as fast as without batching.
//
// A writer learns its result only after its batch has committed, so a job
// is never acked, nor its effect started, before its write is durable:
// batching changes how many commits there are, never what a caller is told
// has committed. The statements are the same ones, each with its ledger
// CTE, so the attempt ledger is written in the same statement as the state
// it belongs to.
//
// There is no goroutine of its own: a batch runs on the goroutine of the
// writer that leads it, and a lead that finishes hands the queued writes to
// one of their own writers. So nothing outlives the writers, and there is
// nothing to close.
//
// A failed batch was rolled back as a whole (a statement failed, or a
// deadlock with another batch), or may have committed (the connection was
// lost at commit): either way each of its statements runs again on its own,
// and fails on its own if it is the one at fault. Both batched statements
// recognise an earlier run of their own: MarkSucceeded by the same token
// changes nothing, and a Take run twice counts one attempt more and ends
// the first one's ledger row as crashed, as after any lost connection.
//
// Lock order. A batch's statements are sorted by the job they write, so two
// batches lock jobs in the same order. The resource lock keeps two attempts
// of one job, or two takes of one resource, out of concurrent batches; only
// an attempt that lost its lock can meet another in PostgreSQL, and if that
// ends in a deadlock, PostgreSQL aborts one batch and its statements run
// again on their own.

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

// write is one statement of a batch that returns one row.
type write struct {
	ctx   context.Context
	sql   string
	args  []any
	order string
	scan  func(pgx.Row) error

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
		return w.err
	}
	c.pending = append(c.pending, w)
	c.mu.Unlock()
	if batch := <-w.next; batch != nil {
		c.lead(batch)
	}
	if w.again {
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
	if len(batch) == 1 {
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
