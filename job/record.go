package job

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

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Row is a job as the jobs table holds it: the source of truth for
// its status, and what the gateway shows as the job document (GET
// /v1/jobs/{id}, openapi.Job) and `idemgate dlq` lists.
type Row struct {
	ID        string
	Task      string
	Status    Status
	Attempts  int
	ResultRef *string
	Error     *string
	CreatedAt time.Time
	UpdatedAt time.Time
	// NotBefore is when a delayed job becomes due; nil for a job that
	// runs at once. It is set when the job is recorded, and only a
	// debounced job's later submits move it.
	NotBefore *time.Time
	// CancelRequestedAt is when the first cancel arrived; nil when none did.
	CancelRequestedAt *time.Time
	// FinishedAt is when the job became final; nil until it is. The jobs
	// retention counts from it.
	FinishedAt *time.Time

	// Tenant, Route and IdempotencyKey are the request's idempotency
	// scope, from which ID derives.
	Tenant, Route, IdempotencyKey string
	Queue                         string
	BusinessKey                   string
	// Payload is the request body as sent.
	Payload json.RawMessage
	// Debounce is the cycle of a debounced job (Spec.Debounce); nil for
	// any other job.
	Debounce *Debounced
}

// ErrNotFound: no such job (for this tenant).
var ErrNotFound = errors.New("job: not found")

// ID derives the job id (and asynq TaskID) from the idempotency scope.
// Length-prefixing keeps ("a:b","c") and ("a","b:c") apart.
func ID(tenant, route, key string) string {
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

// Store reads and writes the jobs table.
type Store struct{ db DB }

// NewStore returns the job store on db.
func NewStore(db DB) *Store { return &Store{db: db} }

// recordColumns are the columns a Record is read from. A scheduled job
// whose time has come reads as queued: it is due, whether or not a worker
// has picked it up yet, and no write is needed to say so.
const recordColumns = `id, tenant, route, idempotency_key, task, queue, business_key, payload,
	CASE WHEN status = 'scheduled' AND not_before <= now() THEN 'queued' ELSE status END,
	attempts, result_ref, last_error, created_at, updated_at, not_before, cancel_requested_at, finished_at,
	` + debounceColumn

// scanTargets are the destinations of recordColumns, in order.
func (j *Row) scanTargets() []any {
	return []any{&j.ID, &j.Tenant, &j.Route, &j.IdempotencyKey, &j.Task, &j.Queue, &j.BusinessKey,
		&j.Payload, &j.Status, &j.Attempts, &j.ResultRef, &j.Error, &j.CreatedAt, &j.UpdatedAt,
		&j.NotBefore, &j.CancelRequestedAt, &j.FinishedAt, &j.Debounce}
}

func scanRecord(row pgx.Row) (Row, error) {
	var j Row
	err := row.Scan(j.scanTargets()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, ErrNotFound
	}
	return j, err
}

// create inserts the job unless it exists and returns the stored one.
// The job's not_before is computed here, once, by the database: the time
// sc gives, or now() + its delay. A job whose not_before is still ahead is
// recorded scheduled. An existing job keeps its own: a retry never moves
// it.
func (s *Store) create(ctx context.Context, j Row, sc Schedule) (Row, bool, error) {
	at, delaySecs := scheduleArgs(sc)
	for range 3 {
		var created bool
		var got Row
		err := s.db.QueryRow(ctx, createJobSQL, j.ID, j.Tenant, j.Route, j.IdempotencyKey, j.Task, j.Queue, j.BusinessKey, j.Payload,
			at, delaySecs, nil).Scan(append(got.scanTargets(), &created)...)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // a concurrent insert our snapshot cannot see yet
		}
		if err != nil {
			return Row{}, false, fmt.Errorf("job: create job: %w", err)
		}
		return got, created, nil
	}
	return Row{}, false, errors.New("job: create job: the row was neither inserted nor found")
}

// createJobSQL inserts a job unless its id exists and returns the stored
// one, with whether it was inserted. $11 is the batch that records it,
// NULL for a single submit.
const createJobSQL = `
WITH sched AS (
    SELECT CASE WHEN $9::timestamptz IS NOT NULL THEN $9::timestamptz
                WHEN $10::float8 IS NOT NULL THEN now() + make_interval(secs => $10::float8)
           END AS not_before
), ins AS (
    INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, not_before, status, batch_id)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, sched.not_before,
           CASE WHEN sched.not_before > now() THEN 'scheduled' ELSE 'queued' END, $11::text
      FROM sched
    ON CONFLICT DO NOTHING
    RETURNING ` + recordColumns + `, true AS created
)
SELECT * FROM ins
UNION ALL
SELECT ` + recordColumns + `, false FROM jobs WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM ins)`

// Get returns the job with id if it belongs to tenant.
func (s *Store) Get(ctx context.Context, tenant, id string) (Row, error) {
	if !Storable(id) || !Storable(tenant) {
		return Row{}, ErrNotFound // no row can hold it
	}
	j, err := scanRecord(s.db.QueryRow(ctx, `SELECT `+recordColumns+` FROM jobs WHERE id = $1 AND tenant = $2`, id, tenant))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Row{}, fmt.Errorf("job: get job: %w", err)
	}
	return j, err
}

// ByID returns the job with id, whatever its tenant (operators).
func (s *Store) ByID(ctx context.Context, id string) (Row, error) {
	if !Storable(id) {
		return Row{}, ErrNotFound
	}
	j, err := scanRecord(s.db.QueryRow(ctx, `SELECT `+recordColumns+` FROM jobs WHERE id = $1`, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Row{}, fmt.Errorf("job: get job: %w", err)
	}
	return j, err
}

// SetStatus records what the worker reports of job id. A succeeded job
// stays succeeded and a cancelled one cancelled: a late report from a
// stale attempt cannot move it back. A job being cancelled (cancelling)
// moves only to succeeded (the attempt in flight did the effect) or to
// cancelled: a report of retrying or failed ends it cancelled, keeping the
// reason, and a report of processing leaves it cancelling. lastErr is shown to the
// job's tenant, so it is the worker's public reason, not an error's full
// text (see workers.StatusFunc); an empty one keeps the last. resultRef
// comes from a receiver's answer: what PostgreSQL's text cannot hold in
// either (U+0000, bytes that are not UTF-8) is stored as U+FFFD.
func (s *Store) SetStatus(ctx context.Context, id string, status Status, attempts int, resultRef, lastErr string) error {
	const next = `(CASE WHEN status <> 'cancelling' OR $2::text IN ('succeeded', 'cancelled') THEN $2::text
	           WHEN $2::text = 'processing' THEN 'cancelling' ELSE 'cancelled' END)`
	const q = `
UPDATE jobs SET status = ` + next + `, attempts = GREATEST(attempts, $3),
       result_ref = COALESCE(NULLIF($4, ''), result_ref),
       last_error = CASE WHEN ` + next + ` = 'succeeded' THEN NULL ELSE COALESCE(NULLIF($5, ''), last_error) END,
       finished_at = CASE WHEN ` + next + ` IN ('succeeded', 'failed', 'cancelled') THEN COALESCE(finished_at, now()) END,
       updated_at = now()
 WHERE id = $1 AND status NOT IN ('succeeded', 'cancelled')`
	_, err := s.db.Exec(ctx, q, id, status, attempts, StorableText(resultRef), StorableText(lastErr))
	if err != nil {
		return fmt.Errorf("job: set job status: %w", err)
	}
	return nil
}

// Follow records what the worker reports of task's job: it is a
// workers.StatusFunc, and so the job document follows the execution.
// The worker framework calls it itself when workers.Deps.Jobs is set, for
// the changes the execution state's statements do not write (an
// attempt's start and its success are written in their commits). A task that carries no job id was not
// submitted through a Submitter: there is no record to keep, and nothing
// is done. key, the business key, is not needed: the job id names the row.
func (s *Store) Follow(ctx context.Context, task *asynq.Task, key string, status Status, attempts int, resultRef, lastErr string) error {
	id := task.Headers()[HeaderID]
	if id == "" {
		return nil
	}
	return s.SetStatus(ctx, id, status, attempts, resultRef, lastErr)
}

// Failed lists failed jobs, newest first, at most limit: FailedMatching
// with no filter.
func (s *Store) Failed(ctx context.Context, limit int) ([]Row, error) {
	return s.FailedMatching(ctx, FailedFilter{}, limit)
}

// Delete removes a job record (operators, after dlq delete), and its
// ledger rows with it: the attempt ledger lives as long as its job.
func (s *Store) Delete(ctx context.Context, id string) error {
	if !Storable(id) {
		return ErrNotFound
	}
	var n int
	err := s.db.QueryRow(ctx, deleteJobSQL, id).Scan(&n)
	if err != nil {
		return fmt.Errorf("job: delete job: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Requeue puts a failed job back to queued (dlq replay); ErrNotFound when
// it is not failed.
func (s *Store) Requeue(ctx context.Context, id string) error {
	if !Storable(id) {
		return ErrNotFound
	}
	tag, err := s.db.Exec(ctx, `UPDATE jobs SET status = 'queued', last_error = NULL, finished_at = NULL, updated_at = now() WHERE id = $1 AND status = 'failed'`, id)
	if err != nil {
		return fmt.Errorf("job: requeue job: %w", err)
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

// unfinished lists the jobs that have not finished (scheduled, queued,
// processing, retrying, cancelling) and whose record has not changed for olderThan, oldest first,
// from after, at most limit. The partial index jobs_unfinished (migration
// 00008) serves it.
func (s *Store) unfinished(ctx context.Context, olderThan time.Duration, after position, limit int) ([]Row, error) {
	const q = `SELECT ` + recordColumns + ` FROM jobs
 WHERE status IN ('scheduled', 'queued', 'processing', 'retrying', 'cancelling')
   AND updated_at < now() - make_interval(secs => $1)
   AND (updated_at, id) > ($2, $3)
 ORDER BY updated_at, id
 LIMIT $4`
	rows, err := s.db.Query(ctx, q, olderThan.Seconds(), after.updatedAt, after.id, limit)
	if err != nil {
		return nil, fmt.Errorf("job: unfinished jobs: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("job: unfinished jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: unfinished jobs: %w", err)
	}
	return out, nil
}

// Storable reports whether s can be a PostgreSQL text value, and so be
// compared with one: UTF-8 without U+0000. A lookup by anything else
// fails in the database (SQLSTATE 22021) instead of finding nothing, so
// a caller answers "not found" for it first.
func Storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// StorableText makes s a PostgreSQL text value: each U+0000, and each
// run of bytes that are not UTF-8, becomes U+FFFD. What a job's document
// keeps from outside (a receiver's result reference, an error) goes
// through it.
func StorableText(s string) string {
	if Storable(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// byIDs returns the jobs with ids that exist, by id, whatever their
// tenant.
func (s *Store) byIDs(ctx context.Context, ids []string) (map[string]Row, error) {
	rows, err := s.db.Query(ctx, `SELECT `+recordColumns+` FROM jobs WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("job: get jobs: %w", err)
	}
	defer rows.Close()
	out := make(map[string]Row, len(ids))
	for rows.Next() {
		var j Row
		if err := rows.Scan(j.scanTargets()...); err != nil {
			return nil, fmt.Errorf("job: get jobs: %w", err)
		}
		out[j.ID] = j
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: get jobs: %w", err)
	}
	return out, nil
}
