package invariants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/examples"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

// effects is every effect row of the business tables with the tenant and
// the business key of the job that makes it (the key its task derives from
// the payload, as declared in examples.JobsYAML), the id its job records as
// result_ref, and when it was written. A payment is an effect once it has
// succeeded; pending and failed ones are intents.
const effects = `
effects (kind, tenant, key, ref, written_at) AS (
    SELECT 'invoice', tenant, 'invoice:' || order_id, id, created_at FROM invoices
    UNION ALL
    SELECT 'inventory ledger row', tenant, 'inventory:' || adjustment_id, adjustment_id, created_at FROM inventory_ledger
    UNION ALL
    SELECT 'payment', tenant, 'payment:' || payment_id, coalesce(partner_charge_id, ''), updated_at FROM payments WHERE status = 'succeeded'
    UNION ALL
    SELECT 'notification', tenant, dedup_key, partner_message_id, created_at FROM notifications
)`

// jobs reports every succeeded job (the public record) whose execution by
// business key has not succeeded, or has another result.
func (c checks) jobs(ctx context.Context, s *reconcile.Snapshot) error {
	const query = `
SELECT j.id, j.tenant, j.business_key, coalesce(e.status, ''), coalesce(e.result_ref, ''), coalesce(j.result_ref, '')
  FROM jobs j
  LEFT JOIN job_executions e ON e.tenant = j.tenant AND e.key = j.business_key
 WHERE j.status = 'succeeded'`
	return s.Scan(ctx, CheckJobs, query, nil, func(rows pgx.Rows) error {
		var id, tenant, key, execRef, jobRef string
		var status job.Status
		if err := rows.Scan(&id, &tenant, &key, &status, &execRef, &jobRef); err != nil {
			return err
		}
		bkey := key
		key = workers.Scope(tenant, key)
		switch {
		case status == "":
			s.JobViolation(CheckJobs, tenant, bkey, fmt.Sprintf("job %s succeeded but %s has no execution", id, key), id, key)
		case status != job.StatusSucceeded:
			s.JobViolation(CheckJobs, tenant, bkey, fmt.Sprintf("job %s succeeded but the execution of %s is %s", id, key, status), id, key)
		case jobRef != "" && jobRef != execRef:
			s.JobViolation(CheckJobs, tenant, bkey, fmt.Sprintf("job %s shows result %s, the execution of %s records %s", id, jobRef, key, execRef), id, key, jobRef, execRef)
		}
		return nil
	})
}

// jobEffects reports every succeeded execution without its effect row, or
// whose result is not that effect.
func (c checks) jobEffects(ctx context.Context, s *reconcile.Snapshot) error {
	query := `
WITH ` + effects + `
SELECT e.tenant, e.key, e.task, coalesce(e.result_ref, ''),
       coalesce(array_agg(f.ref ORDER BY f.ref) FILTER (WHERE f.key IS NOT NULL), '{}')
  FROM job_executions e
  LEFT JOIN effects f ON f.tenant = e.tenant AND f.key = e.key
 WHERE e.status = 'succeeded' AND e.task = ANY($1)
 GROUP BY e.tenant, e.key`
	return s.Scan(ctx, CheckJobEffects, query, []any{examples.Tasks()}, func(rows pgx.Rows) error {
		var (
			tenant, key, task, ref string
			refs                   []string
		)
		if err := rows.Scan(&tenant, &key, &task, &ref, &refs); err != nil {
			return err
		}
		bkey := key
		key = workers.Scope(tenant, key)
		switch {
		case len(refs) == 0:
			s.JobViolation(CheckJobEffects, tenant, bkey, fmt.Sprintf("%s job %s succeeded (result %s) but its effect row is missing", task, key, ref), key, ref)
		case !slices.Contains(refs, ref):
			ids := []string{key, ref}
			for _, other := range refs {
				if other != "" {
					ids = append(ids, other)
				}
			}
			s.JobViolation(CheckJobEffects, tenant, bkey, fmt.Sprintf("%s job %s records result %s, its effect row says %q", task, key, ref, strings.Join(refs, ", ")), ids...)
		}
		return nil
	})
}

// effectJobs reports every effect row (older than Grace) whose job has not
// succeeded: an effect nobody's job accounts for.
func (c checks) effectJobs(ctx context.Context, s *reconcile.Snapshot) error {
	query := `
WITH ` + effects + `
SELECT f.kind, f.tenant, f.key, f.ref, coalesce(e.status, '')
  FROM effects f
  LEFT JOIN job_executions e ON e.tenant = f.tenant AND e.key = f.key
 WHERE f.written_at <= now() - make_interval(secs => $1)`
	return s.Scan(ctx, CheckEffectJobs, query, []any{c.opts.Grace.Seconds()}, func(rows pgx.Rows) error {
		var kind, tenant, key, ref string
		var status job.Status
		if err := rows.Scan(&kind, &tenant, &key, &ref, &status); err != nil {
			return err
		}
		bkey := key
		key = workers.Scope(tenant, key)
		switch status {
		case job.StatusSucceeded:
		case "":
			s.JobViolation(CheckEffectJobs, tenant, bkey, fmt.Sprintf("%s %s exists but job %s has no execution", kind, ref, key), key, ref)
		default:
			s.JobViolation(CheckEffectJobs, tenant, bkey, fmt.Sprintf("%s %s exists but job %s is %s", kind, ref, key, status), key, ref)
		}
		return nil
	})
}

// Effect is one effect row of the business tables.
type Effect struct {
	// Kind names the table: "invoice", "inventory ledger row", "payment",
	// "notification".
	Kind string
	// Ref is the id its job records as result_ref.
	Ref       string
	WrittenAt time.Time
}

// Querier runs a query. A *pgxpool.Pool or a pgx.Tx satisfies it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Effects returns the effect rows that carry tenant's business key, oldest
// first, and whether task is one of the example tasks whose effects the
// business tables hold (false: nothing is looked up). More than one row is
// an effect that happened twice.
func Effects(ctx context.Context, db Querier, task, tenant, key string) ([]Effect, bool, error) {
	if !slices.Contains(examples.Tasks(), task) {
		return nil, false, nil
	}
	rows, err := db.Query(ctx, `
WITH `+effects+`
SELECT kind, ref, written_at FROM effects WHERE tenant = $1 AND key = $2 ORDER BY written_at, ref`, tenant, key)
	if err != nil {
		return nil, true, fmt.Errorf("reconcile: effects of %s: %w", key, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Effect, error) {
		var e Effect
		return e, row.Scan(&e.Kind, &e.Ref, &e.WrittenAt)
	})
	if err != nil {
		return nil, true, fmt.Errorf("reconcile: effects of %s: %w", key, err)
	}
	return out, true, nil
}
