package workers

// A business function that writes its effect through a transaction the
// framework opens and commits (HandleTx), so that a job's PostgreSQL work
// takes three round trips: the take, the effect with BEGIN in front of its
// first statement, and the completion with COMMIT behind it.
// Design: docs/design/round-trips.md

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/workers/execution"
)

// TxFunc is a business function that writes its effect in tx, a
// transaction the framework opens and commits: BEGIN goes out with tx's
// first statement, and the job's success (the execution state, the
// attempt's ledger row, the job document) goes out with COMMIT once fn
// returns resultRef with a nil error, so the effect and the record of its
// success commit together or not at all. An error rolls tx back and is
// handled as Func's is (Permanent, Unavailable, transient).
//
// fn must not commit or roll tx back itself (both return ErrTxOwned), and
// tx is valid only until fn returns. tx.Begin opens a savepoint.
//
// The token reaches nothing outside the database before tx commits, so
// the take that drew it does not wait for its own WAL flush (the commit
// flushes both, in order). A function that sends the token elsewhere
// before that (an HTTP call to a partner) must use Handle instead.
type TxFunc[T any] func(ctx context.Context, tx pgx.Tx, job Job[T]) (resultRef string, err error)

// ErrTxOwned is returned by Commit and Rollback called on the transaction
// HandleTx hands its function: the framework ends it.
var ErrTxOwned = errors.New("workers: the transaction is the framework's to commit: return nil to commit it, an error to roll it back")

// Acquirer hands out a connection of its own: *pgxpool.Pool satisfies it.
type Acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// HandleTx is Handle for a business function whose effect is written in
// the framework's PostgreSQL through the transaction it is given (see
// TxFunc). Deps.DB must also be an Acquirer (a *pgxpool.Pool): HandleTx
// panics otherwise, a wiring mistake found at start-up.
//
// A job then costs three PostgreSQL round trips where Handle with
// Job.CompleteTx costs five: the take (shared with concurrent jobs'
// takes, and not waiting for its WAL flush), BEGIN with the effect's first
// statement, and the completion with COMMIT. A function that writes
// nothing through tx is recorded as Handle records it.
func HandleTx[T any](deps Deps, kind string, key, resource func(T) string, fn TxFunc[T], opts ...Option) asynq.Handler {
	if key == nil || resource == nil || fn == nil {
		panic("workers: HandleTx " + kind + ": nil key, resource or business function")
	}
	pool, ok := deps.DB.(Acquirer)
	if !ok {
		panic(fmt.Sprintf("workers: HandleTx %s: Deps.DB (%T) hands out no connections: give it a *pgxpool.Pool", kind, deps.DB))
	}
	// The takes need not wait for their flush: fn's transaction commits
	// synchronously after them (TxFunc).
	flushLater := func(o *options) { o.flushLater = true }
	return newHandler(deps, kind, func(_ []byte, p T) (string, string, error) { return key(p), resource(p), nil },
		func(ctx context.Context, j Job[T]) (string, error) { return runInTx(ctx, pool, j, fn) },
		append([]Option{flushLater}, opts...)...)
}

// runInTx runs fn in a transaction of its own and ends it.
func runInTx[T any](ctx context.Context, pool Acquirer, j Job[T], fn TxFunc[T]) (string, error) {
	tx := &frameworkTx{pool: pool}
	defer tx.end(context.WithoutCancel(ctx))
	ref, err := fn(ctx, tx, j)
	switch {
	case err != nil:
		return "", err
	case tx.conn == nil:
		return ref, nil // nothing written: the framework records the success
	case j.completion == nil || j.completion.done:
		// fn completed the job itself (Job.CompleteTx), or the Job was
		// made by hand (a unit test of fn): only COMMIT is left.
		if err := tx.tx.Commit(ctx); err != nil {
			return "", fmt.Errorf("workers: commit %s: %w", j.Key, err)
		}
		return ref, nil
	}
	if err := execution.CompleteAndCommit(ctx, tx.conn.Conn(), j.Tenant, j.Key, j.Token, ref); err != nil {
		return "", fmt.Errorf("workers: complete %s: %w", j.Key, err)
	}
	*j.completion = completion{done: true, ref: ref}
	return ref, nil
}

// frameworkTx is the transaction HandleTx hands its function. It holds no
// connection until the first statement, which goes out in one round trip
// with the BEGIN in front of it (pgx.Batch.BeginTx); from then on it is
// that pgx transaction.
type frameworkTx struct {
	pool Acquirer
	conn *pgxpool.Conn // nil until the first statement
	tx   pgx.Tx        // the transaction on conn
	done bool          // fn has returned: the transaction is gone
}

var _ pgx.Tx = (*frameworkTx)(nil)

// end rolls back what was not committed and gives the connection back.
func (t *frameworkTx) end(ctx context.Context) {
	t.done = true
	if t.conn == nil {
		return
	}
	if c := t.conn.Conn().PgConn(); !c.IsClosed() && c.TxStatus() != 'I' {
		// Not committed: an error, or a statement that failed. A failed
		// rollback leaves the connection in a transaction, and the pool
		// closes it.
		_ = t.tx.Rollback(ctx)
	}
	t.conn.Release()
	t.conn, t.tx = nil, nil
}

// first sends b, with BEGIN queued in front of its queries, on a
// connection of its own, and returns the batch's results, BEGIN's already
// read: the caller reads the rest and closes them.
func (t *frameworkTx) first(ctx context.Context, queries []*pgx.QueuedQuery) (pgx.BatchResults, error) {
	if t.done {
		return nil, pgx.ErrTxClosed
	}
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("workers: transaction: %w", err)
	}
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.QueuedQueries = append(b.QueuedQueries, queries...)
	br := conn.SendBatch(ctx, &b)
	t.conn, t.tx = conn, br.Tx()
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("workers: transaction: begin: %w", err)
	}
	return br, nil
}

// begun makes sure the transaction is open, in a round trip of its own
// when no statement opened it yet, and returns it.
func (t *frameworkTx) begun(ctx context.Context) (pgx.Tx, error) {
	switch {
	case t.done:
		return nil, pgx.ErrTxClosed
	case t.tx != nil:
		return t.tx, nil
	}
	br, err := t.first(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return t.tx, nil
}

func (t *frameworkTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.tx != nil || t.done {
		tx, err := t.begun(ctx)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return tx.Exec(ctx, sql, args...)
	}
	br, err := t.first(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, errors.Join(err, br.Close())
}

func (t *frameworkTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.tx != nil || t.done {
		tx, err := t.begun(ctx)
		if err != nil {
			return nil, err
		}
		return tx.Query(ctx, sql, args...)
	}
	br, err := t.first(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *frameworkTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		return failedRow{err}
	}
	return &oneRow{rows: rows}
}

func (t *frameworkTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.begun(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return tx.SendBatch(ctx, b)
}

func (t *frameworkTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

func (t *frameworkTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// Begin opens a savepoint, a transaction nested in this one.
func (t *frameworkTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// Conn is the connection the transaction runs on, opening it first if no
// statement has (nil if that fails).
func (t *frameworkTx) Conn() *pgx.Conn {
	tx, err := t.begun(context.Background())
	if err != nil {
		return nil
	}
	return tx.Conn()
}

// LargeObjects opens the transaction first if no statement has.
func (t *frameworkTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begun(context.Background())
	if err != nil {
		panic(fmt.Sprintf("workers: large objects: %v", err))
	}
	return tx.LargeObjects()
}

func (t *frameworkTx) Commit(context.Context) error   { return ErrTxOwned }
func (t *frameworkTx) Rollback(context.Context) error { return ErrTxOwned }

// batchRows are the rows of the first statement, read from the batch that
// carried BEGIN: closing them closes the batch.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// oneRow is QueryRow's answer from rows: the first row, or pgx.ErrNoRows.
type oneRow struct{ rows pgx.Rows }

func (r *oneRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

type failedRow struct{ err error }

func (r failedRow) Scan(...any) error { return r.err }
