package execution

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/workers/fence"
)

// Status is where a job stands.
type Status string

const (
	// StatusProcessing: an attempt owns the job, or the last one ended with a
	// transient error and the next is due.
	StatusProcessing Status = "processing"
	// StatusSucceeded: the effect happened and ResultRef names its result.
	// Final.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: a permanent error, or the attempts ran out; the task is
	// archived. A delivery after this (a replay from the dead-letter queue)
	// starts again with a fresh attempt count.
	StatusFailed Status = "failed"
)

var (
	// ErrNotFound: no job has that key.
	ErrNotFound = errors.New("execution: no such job")
	// ErrSucceeded: the job has already succeeded and will not run again.
	ErrSucceeded = errors.New("execution: job already succeeded")
	// ErrNotProcessing: the job is not in a state the change applies to.
	ErrNotProcessing = errors.New("execution: job is not processing")
)

// maxErrorLen bounds the stored last_error; a cause longer than this is an
// accident (a whole response body) and is cut.
const maxErrorLen = 2048

// Record is one job's execution state.
type Record struct {
	Key          string
	Task         string
	Resource     string
	Status       Status
	ResultRef    string
	Attempts     int
	FencingToken int64
	LastError    string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// FinishedAt is zero until the job succeeds or fails.
	FinishedAt time.Time
}

// Attempt is an attempt that has taken the job's resource lock and drawn
// its fencing token.
type Attempt struct {
	Key      string
	Task     string
	Resource string
	Token    int64
}

// DB is the part of a PostgreSQL handle the store uses. *pgxpool.Pool,
// *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes job_executions.
type Store struct {
	db DB
}

// New returns a Store on db.
func New(db DB) *Store { return &Store{db: db} }

const columns = `key, task, resource, status, coalesce(result_ref, ''), attempt_count,
	fencing_token, coalesce(last_error, ''), created_at, updated_at, finished_at`

func scan(row pgx.Row) (Record, error) {
	var (
		r        Record
		finished *time.Time
	)
	err := row.Scan(&r.Key, &r.Task, &r.Resource, &r.Status, &r.ResultRef, &r.Attempts,
		&r.FencingToken, &r.LastError, &r.CreatedAt, &r.UpdatedAt, &finished)
	if finished != nil {
		r.FinishedAt = *finished
	}
	return r, err
}

// Get returns the job's record, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (Record, error) {
	r, err := scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM job_executions WHERE key = $1`, key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Record{}, fmt.Errorf("execution: get %q: %w", key, ErrNotFound)
	case err != nil:
		return Record{}, fmt.Errorf("execution: get %q: %w", key, err)
	}
	return r, nil
}

// markProcessing ends the insert of MarkProcessing and Take: a new row is
// attempt 1; an existing one counts one more attempt under the newer token,
// unless the job has succeeded or the token is not newer.
const markProcessing = `
ON CONFLICT (key) DO UPDATE SET
    task          = excluded.task,
    resource      = excluded.resource,
    status        = 'processing',
    attempt_count = CASE WHEN e.status = 'failed' THEN 1 ELSE e.attempt_count + 1 END,
    fencing_token = excluded.fencing_token,
    last_error    = CASE WHEN e.status = 'failed' THEN NULL ELSE e.last_error END,
    result_ref    = NULL,
    finished_at   = NULL,
    updated_at    = now()
WHERE e.status <> 'succeeded'
  AND (e.fencing_token < excluded.fencing_token OR e.resource <> excluded.resource)
RETURNING ` + columns

// MarkProcessing makes attempt a the job's owner in one statement: it creates the
// row (attempt 1) or counts one more attempt and records a's token. It
// refuses a job that has succeeded (the record and an error wrapping
// ErrSucceeded) and an attempt whose token is not newer than the one already
// recorded for the same resource (a *fence.StaleTokenError: a newer attempt
// owns the job). A failed job starts again from attempt 1.
func (s *Store) MarkProcessing(ctx context.Context, a Attempt) (Record, error) {
	const query = `
INSERT INTO job_executions AS e (key, task, resource, status, attempt_count, fencing_token)
VALUES ($1, $2, $3, 'processing', 1, $4)
` + markProcessing
	r, err := scan(s.db.QueryRow(ctx, query, a.Key, a.Task, a.Resource, a.Token))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("execution: mark %q processing: %w", a.Key, err)
	}
	cur, err := s.Get(ctx, a.Key)
	if err != nil {
		return Record{}, fmt.Errorf("execution: mark %q processing: %w", a.Key, err)
	}
	if cur.Status == StatusSucceeded {
		return cur, fmt.Errorf("execution: mark %q processing: %w", a.Key, ErrSucceeded)
	}
	return cur, fmt.Errorf("execution: mark %q processing: %w", a.Key,
		fence.Stale(cur.Resource, a.Token, cur.FencingToken))
}

// Take draws the next fencing token for a.Resource (fence.Next) and marks
// the job processing under it (MarkProcessing), in one statement: one round
// trip and one commit instead of two. a.Token is ignored; the token drawn is
// the returned record's FencingToken. Being the resource's newest token, it
// is refused only for a job that has succeeded (ErrSucceeded, with the
// record). A token drawn for a refused attempt is spent: tokens only need
// to increase, not to be consecutive.
func (s *Store) Take(ctx context.Context, a Attempt) (Record, error) {
	const query = `
WITH next AS (` + fence.NextStatement + `
)
INSERT INTO job_executions AS e (key, task, resource, status, attempt_count, fencing_token)
SELECT $2, $3, $1, 'processing', 1, next.token FROM next
` + markProcessing
	r, err := scan(s.db.QueryRow(ctx, query, a.Resource, a.Key, a.Task))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("execution: take %q: %w", a.Key, err)
	}
	cur, err := s.Get(ctx, a.Key)
	if err != nil {
		return Record{}, fmt.Errorf("execution: take %q: %w", a.Key, err)
	}
	if cur.Status == StatusSucceeded {
		return cur, fmt.Errorf("execution: take %q: %w", a.Key, ErrSucceeded)
	}
	// Only a token issued outside the fence (a hand-written row) can be
	// older than the one recorded.
	return cur, fmt.Errorf("execution: take %q: %w", a.Key, fence.Stale(cur.Resource, 0, cur.FencingToken))
}

// MarkSucceeded records the job's result, if the attempt holding token
// still owns it. It is the last write of a job: the task is acked after it.
// Called again by the same attempt it does nothing.
func (s *Store) MarkSucceeded(ctx context.Context, key string, token int64, resultRef string) error {
	tag, err := s.db.Exec(ctx, `
UPDATE job_executions
   SET status = 'succeeded', result_ref = $3, last_error = NULL, finished_at = now(), updated_at = now()
 WHERE key = $1 AND fencing_token = $2 AND status = 'processing'`, key, token, resultRef)
	return s.settle(ctx, "succeeded", key, token, StatusSucceeded, tag, err)
}

// MarkRetrying records the transient error an attempt ended with; the job
// stays processing until the next attempt.
func (s *Store) MarkRetrying(ctx context.Context, key string, token int64, lastErr string) error {
	tag, err := s.db.Exec(ctx, `
UPDATE job_executions SET last_error = $3, updated_at = now()
 WHERE key = $1 AND fencing_token = $2 AND status = 'processing'`, key, token, clip(lastErr))
	return s.settle(ctx, "retrying", key, token, StatusProcessing, tag, err)
}

// MarkFailed records that the job has failed for good: a permanent error,
// or no attempts left.
func (s *Store) MarkFailed(ctx context.Context, key string, token int64, lastErr string) error {
	tag, err := s.db.Exec(ctx, `
UPDATE job_executions
   SET status = 'failed', last_error = $3, finished_at = now(), updated_at = now()
 WHERE key = $1 AND fencing_token = $2 AND status = 'processing'`, key, token, clip(lastErr))
	return s.settle(ctx, "failed", key, token, StatusFailed, tag, err)
}

// settle explains a conditional update that touched no row.
func (s *Store) settle(ctx context.Context, op, key string, token int64, want Status, tag pgconn.CommandTag, err error) error {
	if err != nil {
		return fmt.Errorf("execution: mark %q %s: %w", key, op, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	cur, err := s.Get(ctx, key)
	switch {
	case err != nil:
		return fmt.Errorf("execution: mark %q %s: %w", key, op, err)
	case cur.FencingToken != token:
		return fmt.Errorf("execution: mark %q %s: %w", key, op, fence.Stale(cur.Resource, token, cur.FencingToken))
	case cur.Status == want:
		return nil
	case cur.Status == StatusSucceeded:
		return fmt.Errorf("execution: mark %q %s: %w", key, op, ErrSucceeded)
	}
	return fmt.Errorf("execution: mark %q %s: %w (it is %s)", key, op, ErrNotProcessing, cur.Status)
}

// clip keeps a stored error short and valid UTF-8.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxErrorLen {
		return s
	}
	cut := maxErrorLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
