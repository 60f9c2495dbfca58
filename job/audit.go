package job

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// MaxReasonBytes bounds the reason an operator gives for an action.
const MaxReasonBytes = 1000

// ErrReasonTooLong refuses a reason longer than MaxReasonBytes, or one
// that is not UTF-8.
var ErrReasonTooLong = errors.New("job: the reason is longer than 1000 bytes or not UTF-8")

// Action is one row of the audit trail (table admin_actions): an operator
// acted on a job or an idempotency key, through the admin API or the
// console.
type Action struct {
	// ID numbers the action; the rows of one bulk action share it.
	ID int64
	At time.Time
	// Actor is who acted: the HTTP Basic user name, or "admin token".
	Actor string
	// Action is what: cancel, replay, delete, requeue, delete-key,
	// resolve-key, …
	Action string
	// Via is where from: "api" (the admin API) or "console".
	Via string
	// Tenant, and JobID or Route and Key, name the target.
	Tenant, JobID, Route, Key string
	// Filter is the query a bulk action chose its jobs by; "" for an
	// action on one target.
	Filter string
	// Reason is what the operator typed; "" when they gave none.
	Reason string
}

// CheckReason refuses a reason that is too long or not UTF-8.
func CheckReason(reason string) error {
	if len(reason) > MaxReasonBytes || !utf8.ValidString(reason) {
		return ErrReasonTooLong
	}
	return nil
}

// RecordAction writes a, one row per target in targets (each an Action
// whose Tenant, JobID, Route and Key name it; the rest is a's), and
// returns a with its ID and At set.
func (s *Store) RecordAction(ctx context.Context, a Action, targets []Action) (Action, error) {
	if err := CheckReason(a.Reason); err != nil {
		return a, err
	}
	if len(targets) == 0 {
		targets = []Action{a}
	}
	tenants := make([]string, len(targets))
	jobs := make([]string, len(targets))
	routes := make([]string, len(targets))
	keys := make([]string, len(targets))
	for i, t := range targets {
		tenants[i], jobs[i], routes[i], keys[i] = t.Tenant, t.JobID, t.Route, t.Key
	}
	// nextval is evaluated per row: take one id first, then write every
	// row under it.
	var id int64
	if err := s.db.QueryRow(ctx, `SELECT nextval('admin_actions_action_id')`).Scan(&id); err != nil {
		return a, fmt.Errorf("job: record action %s: %w", a.Action, err)
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO admin_actions (action_id, actor, action, via, filter, reason, tenant, job_id, route, idempotency_key)
SELECT $1, $2, $3, $4, $5, $6, t.tenant, NULLIF(t.job_id, ''), NULLIF(t.route, ''), NULLIF(t.key, '')
  FROM unnest($7::text[], $8::text[], $9::text[], $10::text[]) AS t(tenant, job_id, route, key)`,
		id, a.Actor, a.Action, a.Via, a.Filter, a.Reason, tenants, jobs, routes, keys)
	if err != nil {
		return a, fmt.Errorf("job: record action %s: %w", a.Action, err)
	}
	a.ID = id
	return a, nil
}

// actionColumns are the columns an Action is read from.
const actionColumns = `action_id, at, actor, action, via, tenant, COALESCE(job_id, ''), COALESCE(route, ''), COALESCE(idempotency_key, ''), filter, reason`

// maxActionsShown bounds the actions a job's or key's story lists: the
// newest ones.
const maxActionsShown = 100

// ActionsOnJob returns the actions on the job with id, oldest first (at
// most the newest 100).
func (s *Store) ActionsOnJob(ctx context.Context, id string) ([]Action, error) {
	return s.actions(ctx, `SELECT * FROM (SELECT `+actionColumns+`, id FROM admin_actions WHERE job_id = $1 ORDER BY id DESC LIMIT $2) a ORDER BY id`, id, maxActionsShown)
}

// ActionsOnKey returns the actions on the idempotency key (tenant, route,
// key), oldest first (at most the newest 100).
func (s *Store) ActionsOnKey(ctx context.Context, tenant, route, key string) ([]Action, error) {
	return s.actions(ctx, `SELECT * FROM (SELECT `+actionColumns+`, id FROM admin_actions
 WHERE tenant = $1 AND route = $2 AND idempotency_key = $3 ORDER BY id DESC LIMIT $4) a ORDER BY id`, tenant, route, key, maxActionsShown)
}

func (s *Store) actions(ctx context.Context, sql string, args ...any) ([]Action, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("job: read actions: %w", err)
	}
	defer rows.Close()
	var out []Action
	for rows.Next() {
		var a Action
		var rowID int64
		if err := rows.Scan(&a.ID, &a.At, &a.Actor, &a.Action, &a.Via, &a.Tenant, &a.JobID, &a.Route, &a.Key, &a.Filter, &a.Reason, &rowID); err != nil {
			return nil, fmt.Errorf("job: read actions: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: read actions: %w", err)
	}
	return out, nil
}

// DeleteOldActions deletes at most limit rows of the audit trail older
// than retention, oldest first, and reports how many it deleted: the
// audit trail is kept as long as jobs are (the retention janitor runs it
// with the jobs retention).
func (s *Store) DeleteOldActions(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, `
DELETE FROM admin_actions a
 USING (SELECT tenant, id FROM admin_actions WHERE at <= now() - make_interval(secs => $1)
         ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED) d
 WHERE a.tenant = d.tenant AND a.id = d.id`, retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("job: delete old actions: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
