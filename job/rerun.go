package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNotRerunnable: the job is neither cancelled nor failed, so it is not
// re-run as a new job.
var ErrNotRerunnable = errors.New("job: only a cancelled or failed job is re-run")

// ErrUnknownTask: the configuration declares no job for the task, so its
// payload cannot be submitted again.
var ErrUnknownTask = errors.New("job: no job declared for the task")

// RerunKey is the idempotency key of the job that re-runs the job id.
// One job is re-run once: a second re-run returns the same new job. To
// try again, re-run the new one.
func RerunKey(id string) string { return "rerun:" + id }

// Rerun submits the cancelled or failed job id again as a new job, with
// its tenant, route, task and payload, through Submit (validation, its
// record, its task), on the old job's queue, under the idempotency key
// RerunKey(id). spec finds
// the declared job of a task. The new job's record says it re-runs id.
// It returns the new job; an error wrapping ErrTaskDeferred comes with
// it, as from Submit.
func (e *Submitter) Rerun(ctx context.Context, id string, spec func(task string) (*Spec, bool)) (Row, error) {
	old, err := e.records.ByID(ctx, id)
	if err != nil {
		return Row{}, err
	}
	if old.Status != StatusCancelled && old.Status != StatusFailed {
		return Row{}, fmt.Errorf("%w: %s is %s", ErrNotRerunnable, id, old.Status)
	}
	s, ok := spec(old.Task)
	if !ok {
		return Row{}, fmt.Errorf("%w: %s", ErrUnknownTask, old.Task)
	}
	req := Request{Tenant: old.Tenant, Route: old.Route, Key: RerunKey(id), Spec: s, Body: old.Payload}
	if e.Shards <= 1 {
		// The old job's queue: its route's own, when it has one. A
		// sharded queue's name is the shard's, so there the job's
		// declared queue is sharded again.
		req.Queue = old.Queue
	}
	rec, subErr := e.Submit(ctx, req)
	if subErr != nil && !errors.Is(subErr, ErrTaskDeferred) {
		return Row{}, subErr
	}
	// After Submit, so that a re-run that failed half-way links its job
	// when it is sent again.
	if _, err := e.records.db.Exec(ctx, `UPDATE jobs SET rerun_of = $2 WHERE id = $1 AND rerun_of IS NULL`, rec.ID, id); err != nil {
		return rec, fmt.Errorf("job: link the re-run of %s: %w", id, err)
	}
	return rec, subErr
}

// maxRerunsShown bounds the re-runs Reruns lists.
const maxRerunsShown = 20

// Reruns returns the job that job id re-runs ("" when none) and the jobs
// that re-run it, oldest first (at most 20).
func (s *Store) Reruns(ctx context.Context, id string) (of string, as []string, err error) {
	var ofp *string
	err = s.db.QueryRow(ctx, `SELECT rerun_of FROM jobs WHERE id = $1`, id).Scan(&ofp)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil, ErrNotFound
	case err != nil:
		return "", nil, fmt.Errorf("job: re-runs of %s: %w", id, err)
	}
	if ofp != nil {
		of = *ofp
	}
	rows, err := s.db.Query(ctx, `SELECT id FROM jobs WHERE rerun_of = $1 ORDER BY created_at, id LIMIT $2`, id, maxRerunsShown)
	if err != nil {
		return "", nil, fmt.Errorf("job: re-runs of %s: %w", id, err)
	}
	if as, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return "", nil, fmt.Errorf("job: re-runs of %s: %w", id, err)
	}
	return of, as, nil
}
