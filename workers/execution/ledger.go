package execution

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Outcome is how one attempt of a job ended, as the ledger (job_attempts)
// records it.
type Outcome string

const (
	// OutcomeSucceeded: the attempt did the effect and recorded it.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeTransient: an error the job is retried after.
	OutcomeTransient Outcome = "transient"
	// OutcomeUnavailable: a dependency was down; the attempt was given back.
	OutcomeUnavailable Outcome = "unavailable"
	// OutcomePermanent: an error retrying cannot fix; the job failed.
	OutcomePermanent Outcome = "permanent"
	// OutcomeLockBusy: another worker held the resource; nothing ran and no
	// token was drawn.
	OutcomeLockBusy Outcome = "lock_busy"
	// OutcomeLockLost: the attempt lost its resource lock while running.
	OutcomeLockLost Outcome = "lock_lost"
	// OutcomeStaleToken: the execution state already belonged to a newer
	// token when the attempt tried to record its outcome.
	OutcomeStaleToken Outcome = "stale_token"
	// OutcomeSuperseded: the business write (or the receiver) refused the
	// attempt's token: a newer attempt had already applied its own.
	OutcomeSuperseded Outcome = "superseded"
	// OutcomeCrashed: a later attempt found this one unfinished; its worker
	// died, or was cut off, before recording an outcome.
	OutcomeCrashed Outcome = "crashed"
	// OutcomeCancelled: the job was cancelled while the attempt ran and the
	// attempt did not succeed (its context cancelled, its write fenced out
	// by the cancel's token, an HTTP delivery answered with a failure or
	// not at all); or, with no token, a delivery refused because the job
	// was cancelled before it.
	OutcomeCancelled Outcome = "cancelled"
)

// The error of a ledger row that ended OutcomeCancelled starts with one of
// these, so that explain and reconcile tell the cases apart: the attempt
// in flight was stopped (its context cancelled, or it failed) with no
// effect; its business write was refused by the cancel's fencing token;
// an HTTP delivery got no answer, so the receiver may have applied it;
// the delivery was refused because the job was cancelled before it.
const (
	CancelledStopped  = "cancelled in flight"
	CancelledFenced   = "cancelled in flight, the effect fenced out"
	CancelledNoAnswer = "cancelled in flight, no answer: the receiver may have applied it"
	CancelledBefore   = "cancelled before this delivery: nothing ran"
)

// NoAnswer starts the ledger error of an attempt whose HTTP delivery got
// no answer (a timeout, a connection lost after the request went out), so
// that explain can tell "the receiver refused it" from "the receiver may
// have applied it" whatever the outcome the attempt ended with.
const NoAnswer = "no answer, the receiver may have applied it"

// Unanswered reports whether a ledger row's error says its delivery got no
// answer: it holds NoAnswer (after "attempts exhausted …: " when it was
// the last), starts with CancelledNoAnswer, or is the delivery's own
// timeout (rows written before NoAnswer was).
func Unanswered(ledgerErr string) bool {
	return strings.Contains(ledgerErr, NoAnswer) || strings.HasPrefix(ledgerErr, CancelledNoAnswer) ||
		strings.Contains(ledgerErr, ": no answer within ")
}

// Entry is one row of the attempt ledger.
type Entry struct {
	JobID    string
	Tenant   string
	Key      string
	Task     string
	Resource string
	// Attempt is the attempt number the business function was given (an
	// attempt given back for an unavailable dependency repeats it).
	Attempt int
	// FencingToken is 0 for a lock_busy row: no token was drawn.
	FencingToken int64
	Worker       string
	StartedAt    time.Time
	// EndedAt is zero and Outcome "" while the attempt runs.
	EndedAt time.Time
	Outcome Outcome
	Error   string
}

// Querier runs queries returning rows. *pgxpool.Pool, *pgx.Conn and pgx.Tx
// satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// EndAttempt ends the ledger row of the attempt holding token with
// outcome, for an attempt that could not record its outcome in the
// execution state because a newer attempt owns it (OutcomeLockLost,
// OutcomeStaleToken, OutcomeSuperseded). It replaces OutcomeCrashed, which
// the newer attempt may already have written, and leaves any other
// outcome alone.
func (s *Store) EndAttempt(ctx context.Context, tenant, key string, token int64, outcome Outcome, lastErr string) error {
	_, err := s.db.Exec(ctx, `
UPDATE job_attempts SET outcome = $4, ended_at = now(), error = NULLIF($5, '')
 WHERE tenant = $1 AND key = $2 AND fencing_token = $3 AND (outcome IS NULL OR outcome = 'crashed')`,
		tenant, key, token, string(outcome), clip(lastErr))
	if err != nil {
		return fmt.Errorf("execution: end attempt of %q: %w", key, err)
	}
	return nil
}

// attemptsSoFar is the job's attempt count as its execution row has it
// (0 for a job that has none), for the ledger rows of deliveries that did
// not become attempts; $2 and $3 are the tenant and the key.
const attemptsSoFar = `COALESCE((SELECT attempt_count FROM job_executions WHERE tenant = $2 AND key = $3), 0)`

// RecordBusy adds an ended lock_busy row for a delivery of a that found its
// resource locked by another worker, numbered with the job's attempts so
// far (the busy delivery does not count); a.Token is ignored. It is a
// write of its own, on the contended path only.
func (s *Store) RecordBusy(ctx context.Context, a Attempt) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, worker, ended_at, outcome)
VALUES ($1, $2, $3, $4, $5, `+attemptsSoFar+`, $6, now(), 'lock_busy')`,
		a.JobID, a.Tenant, a.Key, a.Task, a.Resource, a.Worker)
	if err != nil {
		return fmt.Errorf("execution: record busy attempt of %q: %w", a.Key, err)
	}
	return nil
}

const entryColumns = `job_id, tenant, key, task, resource, attempt, coalesce(fencing_token, 0), worker,
	started_at, ended_at, coalesce(outcome, ''), coalesce(error, '')`

// Attempts returns the ledger of tenant's job key, oldest first.
func Attempts(ctx context.Context, db Querier, tenant, key string) ([]Entry, error) {
	rows, err := db.Query(ctx, `SELECT `+entryColumns+` FROM job_attempts WHERE tenant = $1 AND key = $2 ORDER BY id`, tenant, key)
	if err != nil {
		return nil, fmt.Errorf("execution: attempts of %q: %w", key, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var (
			e     Entry
			ended *time.Time
		)
		err := row.Scan(&e.JobID, &e.Tenant, &e.Key, &e.Task, &e.Resource, &e.Attempt, &e.FencingToken, &e.Worker,
			&e.StartedAt, &ended, &e.Outcome, &e.Error)
		if ended != nil {
			e.EndedAt = *ended
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("execution: attempts of %q: %w", key, err)
	}
	return out, nil
}

// DeleteEndedAttempts deletes at most limit ledger rows of tasks that ran
// without a job (job id "", enqueued by hand) and ended more than
// retention ago, oldest first, and reports how many it deleted. The rows
// of a job live as long as the job: the jobs retention deletes them with
// it (job.Store.DeleteFinished). Unfinished rows stay until a later
// attempt ends them.
func (s *Store) DeleteEndedAttempts(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, `
DELETE FROM job_attempts WHERE id IN (
    SELECT id FROM job_attempts
     WHERE job_id = '' AND ended_at IS NOT NULL AND ended_at <= now() - make_interval(secs => $1)
     ORDER BY ended_at LIMIT $2
     FOR UPDATE SKIP LOCKED)`, retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("execution: delete ended attempts: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
