package enqueue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/job"
)

// Job statuses, as the job document shows them: job.Status's values.
const (
	StatusQueued     = job.Queued
	StatusProcessing = job.Processing
	StatusRetrying   = job.Retrying
	StatusSucceeded  = job.Succeeded
	StatusFailed     = job.Failed
)

// Job is the public job document (GET /v1/jobs/{id}).
type Job struct {
	ID        string     `json:"id"`
	Task      string     `json:"task"`
	Status    job.Status `json:"status"`
	Attempts  int        `json:"attempts"`
	ResultRef *string    `json:"result_ref"`
	Error     *string    `json:"error"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`

	Tenant         string          `json:"-"`
	Route          string          `json:"-"`
	IdempotencyKey string          `json:"-"`
	Queue          string          `json:"-"`
	BusinessKey    string          `json:"-"`
	Payload        json.RawMessage `json:"-"`
}

// ErrNotFound: no such job (for this tenant).
var ErrNotFound = errors.New("enqueue: job not found")

// JobID derives the job id (and asynq TaskID) from the idempotency scope.
// Length-prefixing keeps ("a:b","c") and ("a","b:c") apart.
func JobID(tenant, route, key string) string {
	h := sha256.New()
	for _, s := range []string{tenant, route, key} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return "job_" + hex.EncodeToString(h.Sum(nil))[:32]
}

// DB is what the job store needs of a pgx pool or transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Jobs reads and writes the jobs table.
type Jobs struct{ db DB }

// NewJobs returns the job store on db.
func NewJobs(db DB) *Jobs { return &Jobs{db: db} }

const jobColumns = `id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, result_ref, last_error, created_at, updated_at`

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	err := row.Scan(&j.ID, &j.Tenant, &j.Route, &j.IdempotencyKey, &j.Task, &j.Queue, &j.BusinessKey,
		&j.Payload, &j.Status, &j.Attempts, &j.ResultRef, &j.Error, &j.CreatedAt, &j.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	return j, err
}

// create inserts the job unless it exists and returns the stored one.
func (s *Jobs) create(ctx context.Context, j Job) (Job, bool, error) {
	const q = `
WITH ins AS (
    INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT DO NOTHING
    RETURNING ` + jobColumns + `, true AS created
)
SELECT * FROM ins
UNION ALL
SELECT ` + jobColumns + `, false FROM jobs WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM ins)`
	for range 3 {
		var created bool
		var got Job
		err := s.db.QueryRow(ctx, q, j.ID, j.Tenant, j.Route, j.IdempotencyKey, j.Task, j.Queue, j.BusinessKey, j.Payload).Scan(
			&got.ID, &got.Tenant, &got.Route, &got.IdempotencyKey, &got.Task, &got.Queue, &got.BusinessKey,
			&got.Payload, &got.Status, &got.Attempts, &got.ResultRef, &got.Error, &got.CreatedAt, &got.UpdatedAt, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // a concurrent insert our snapshot cannot see yet
		}
		if err != nil {
			return Job{}, false, fmt.Errorf("enqueue: create job: %w", err)
		}
		return got, created, nil
	}
	return Job{}, false, errors.New("enqueue: create job: the row was neither inserted nor found")
}

// Get returns the job with id if it belongs to tenant.
func (s *Jobs) Get(ctx context.Context, tenant, id string) (Job, error) {
	if !storable(id) || !storable(tenant) {
		return Job{}, ErrNotFound // no row can hold it
	}
	j, err := scanJob(s.db.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1 AND tenant = $2`, id, tenant))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Job{}, fmt.Errorf("enqueue: get job: %w", err)
	}
	return j, err
}

// ByID returns the job with id, whatever its tenant (operators).
func (s *Jobs) ByID(ctx context.Context, id string) (Job, error) {
	if !storable(id) {
		return Job{}, ErrNotFound
	}
	j, err := scanJob(s.db.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Job{}, fmt.Errorf("enqueue: get job: %w", err)
	}
	return j, err
}

// SetStatus records what the worker reports (status is a job.Status, as
// workers.StatusFunc is told it). A succeeded job stays succeeded: a late
// report from a stale attempt cannot move it back. resultRef and lastErr
// come from receivers' answers: what PostgreSQL's text cannot hold in
// them (U+0000, bytes that are not UTF-8) is stored as U+FFFD.
func (s *Jobs) SetStatus(ctx context.Context, id, status string, attempts int, resultRef, lastErr string) error {
	const q = `
UPDATE jobs SET status = $2, attempts = GREATEST(attempts, $3),
       result_ref = COALESCE(NULLIF($4, ''), result_ref),
       last_error = CASE WHEN $2 = 'succeeded' THEN NULL ELSE COALESCE(NULLIF($5, ''), last_error) END,
       updated_at = now()
 WHERE id = $1 AND status <> 'succeeded'`
	_, err := s.db.Exec(ctx, q, id, status, attempts, storableText(resultRef), storableText(lastErr))
	if err != nil {
		return fmt.Errorf("enqueue: set job status: %w", err)
	}
	return nil
}

// Failed lists failed jobs, newest first, at most limit.
func (s *Jobs) Failed(ctx context.Context, limit int) ([]Job, error) {
	rows, err := s.db.Query(ctx, `SELECT `+jobColumns+` FROM jobs WHERE status = 'failed' ORDER BY updated_at DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("enqueue: failed jobs: %w", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("enqueue: failed jobs: %w", err)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// Delete removes a job record (operators, after dlq delete).
func (s *Jobs) Delete(ctx context.Context, id string) error {
	if !storable(id) {
		return ErrNotFound
	}
	tag, err := s.db.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("enqueue: delete job: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Requeue puts a failed job back to queued (dlq replay); ErrNotFound when
// it is not failed.
func (s *Jobs) Requeue(ctx context.Context, id string) error {
	if !storable(id) {
		return ErrNotFound
	}
	tag, err := s.db.Exec(ctx, `UPDATE jobs SET status = 'queued', last_error = NULL, updated_at = now() WHERE id = $1 AND status = 'failed'`, id)
	if err != nil {
		return fmt.Errorf("enqueue: requeue job: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// position is a place in the order the relay reads jobs in: by updated_at,
// then id. The zero value is before every job.
type position struct {
	updatedAt time.Time
	id        string
}

// unfinished lists the jobs that have not finished (queued, processing,
// retrying) and whose record has not changed for olderThan, oldest first,
// from after, at most limit. The partial index jobs_unfinished (migration
// 00008) serves it.
func (s *Jobs) unfinished(ctx context.Context, olderThan time.Duration, after position, limit int) ([]Job, error) {
	const q = `SELECT ` + jobColumns + ` FROM jobs
 WHERE status IN ('queued', 'processing', 'retrying')
   AND updated_at < now() - make_interval(secs => $1)
   AND (updated_at, id) > ($2, $3)
 ORDER BY updated_at, id
 LIMIT $4`
	rows, err := s.db.Query(ctx, q, olderThan.Seconds(), after.updatedAt, after.id, limit)
	if err != nil {
		return nil, fmt.Errorf("enqueue: unfinished jobs: %w", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("enqueue: unfinished jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("enqueue: unfinished jobs: %w", err)
	}
	return out, nil
}

// storable reports whether s can be a PostgreSQL text value, and so be
// compared with one: UTF-8 without U+0000. A lookup by anything else
// fails in the database (SQLSTATE 22021) instead of finding nothing.
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// storableText makes s a PostgreSQL text value: each U+0000, and each
// run of bytes that are not UTF-8, becomes U+FFFD.
func storableText(s string) string {
	if storable(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
