package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers/fence"
)

// ErrNotCancellable: the job has already succeeded or failed; a cancel
// cannot undo it.
var ErrNotCancellable = errors.New("job: not cancellable")

// Cancel cancels tenant's job id and returns the job as the cancel left
// it, and whether this cancel found an attempt in flight (the job was
// processing and is now cancelling):
//
//   - scheduled, queued or retrying: cancelled at once, and no attempt
//     ever starts (the worker's take refuses a cancelled job, so a task
//     that escaped deletion does nothing);
//   - processing: cancelling. The cancel draws the next fencing token of
//     the job's resource and makes it the newest accepted
//     (fence.Supersede), so the attempt in flight cannot commit a fenced
//     write after the cancel did; the worker's cancel watcher cancels a
//     Go handler's context, and the attempt's end decides between
//     succeeded and cancelled;
//   - cancelling or cancelled: unchanged (a cancel converges);
//   - succeeded or failed: the job with an error wrapping
//     ErrNotCancellable.
//
// The job's cancel_requested_at is set by the first cancel. Another
// tenant's job, or an unknown id, is ErrNotFound. The jobs row is locked
// for the cancel's transaction, as the worker's take locks it, so the two
// are serialised.
func (s *Store) Cancel(ctx context.Context, tenant, id string) (Row, bool, error) {
	if !Storable(tenant) {
		return Row{}, false, ErrNotFound
	}
	return s.cancel(ctx, id, &tenant)
}

// CancelByID is Cancel whatever the job's tenant (operators).
func (s *Store) CancelByID(ctx context.Context, id string) (Row, bool, error) {
	return s.cancel(ctx, id, nil)
}

// beginner starts a transaction: *pgxpool.Pool, *pgx.Conn and pgx.Tx do.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func (s *Store) cancel(ctx context.Context, id string, tenant *string) (Row, bool, error) {
	if !Storable(id) {
		return Row{}, false, ErrNotFound
	}
	db, ok := s.db.(beginner)
	if !ok {
		return Row{}, false, fmt.Errorf("job: cancel %s: the store's database cannot begin a transaction (%T)", id, s.db)
	}
	var (
		rec      Row
		stopping bool
	)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		rec, stopping, err = cancelIn(ctx, tx, id, tenant)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotCancellable) {
		return Row{}, false, fmt.Errorf("job: cancel %s: %w", id, err)
	}
	return rec, stopping, err
}

// cancelIn is the cancel's transaction. It returns ErrNotCancellable with
// the record; the transaction is then rolled back, having changed nothing.
func cancelIn(ctx context.Context, tx pgx.Tx, id string, tenant *string) (Row, bool, error) {
	rec, err := scanRecord(tx.QueryRow(ctx, `SELECT `+recordColumns+` FROM jobs
 WHERE id = $1 AND ($2::text IS NULL OR tenant = $2) FOR UPDATE`, id, tenant))
	if err != nil {
		return Row{}, false, err
	}
	switch rec.Status {
	case StatusSucceeded, StatusFailed:
		return rec, false, fmt.Errorf("%w: %s has %s", ErrNotCancellable, id, rec.Status)
	case StatusCancelling, StatusCancelled:
		return rec, false, nil
	case StatusProcessing:
		// The resource is the one the attempt in flight took: the worker
		// renders it from the payload, and the execution row keeps it.
		var resource string
		err := tx.QueryRow(ctx, `SELECT resource FROM job_executions WHERE tenant = $1 AND key = $2 AND status = 'processing'`,
			rec.Tenant, rec.BusinessKey).Scan(&resource)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// The attempt has already recorded its end: nothing to fence.
		case err != nil:
			return Row{}, false, err
		default:
			if _, err := fence.Supersede(ctx, tx, resource); err != nil {
				return Row{}, false, err
			}
		}
		rec, err := scanRecord(tx.QueryRow(ctx, `UPDATE jobs
   SET status = 'cancelling', cancel_requested_at = COALESCE(cancel_requested_at, now()), updated_at = now()
 WHERE id = $1 RETURNING `+recordColumns, id))
		return rec, err == nil, err
	}
	// Scheduled, queued or retrying: no attempt is in flight (a take would
	// have moved the row to processing under this lock). A job between
	// attempts holds its business key in a processing execution row: it
	// is released as a failed job's is, unless an attempt of another job
	// with the same key is open on it.
	_, err = tx.Exec(ctx, `
UPDATE job_executions e SET status = 'cancelled', finished_at = now(), updated_at = now()
 WHERE e.tenant = $1 AND e.key = $2 AND e.status = 'processing'
   AND NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.tenant = e.tenant AND a.key = e.key AND a.outcome IS NULL)`,
		rec.Tenant, rec.BusinessKey)
	if err != nil {
		return Row{}, false, err
	}
	rec, err = scanRecord(tx.QueryRow(ctx, `UPDATE jobs
   SET status = 'cancelled', cancel_requested_at = COALESCE(cancel_requested_at, now()),
       finished_at = COALESCE(finished_at, now()), updated_at = now()
 WHERE id = $1 RETURNING `+recordColumns, id))
	return rec, false, err
}

// Cancelling returns which of ids are being cancelled (cancelling, or
// already cancelled), in one query: the worker's cancel watcher asks it
// for the jobs it runs.
func (s *Store) Cancelling(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.db.Query(ctx, `SELECT id FROM jobs WHERE id = ANY($1) AND status IN ('cancelling', 'cancelled')`, ids)
	if err != nil {
		return nil, fmt.Errorf("job: cancelling jobs: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("job: cancelling jobs: %w", err)
	}
	return found, nil
}

// Cancel is Store.Cancel, and then deletes the task of a job it
// cancelled from the queue when the Submitter has an Inspector: the task
// would do nothing (the worker refuses a cancelled job), so this only
// spares it a delivery. A failure to delete is not the cancel's.
func (e *Submitter) Cancel(ctx context.Context, tenant, id string) (Row, bool, error) {
	rec, stopping, err := e.records.Cancel(ctx, tenant, id)
	e.dropTask(rec, err)
	return rec, stopping, err
}

// CancelByID is Cancel whatever the job's tenant (operators).
func (e *Submitter) CancelByID(ctx context.Context, id string) (Row, bool, error) {
	rec, stopping, err := e.records.CancelByID(ctx, id)
	e.dropTask(rec, err)
	return rec, stopping, err
}

func (e *Submitter) dropTask(rec Row, err error) {
	if err != nil || rec.Status != StatusCancelled || e.Inspector == nil {
		return
	}
	// A task being processed is refused by asynq (and is not there when
	// a cancel answers cancelled); any other state goes.
	_ = e.Inspector.DeleteTask(rec.Queue, TaskID(rec))
}
