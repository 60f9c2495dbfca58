package receiver

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Schema creates the two tables Apply keeps in the receiver's own database.
// idemgate_deliveries holds one row per applied (tenant, idempotency_key)
// with the result_ref a repeat answers; idemgate_fences holds the newest
// fencing token applied per (tenant, resource). Running it again changes
// nothing.
const Schema = `
CREATE TABLE IF NOT EXISTS idemgate_deliveries (
    tenant          text        NOT NULL,
    idempotency_key text        NOT NULL,
    resource        text        NOT NULL,
    fencing_token   bigint      NOT NULL,
    job_id          text        NOT NULL,
    result_ref      text        NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, idempotency_key)
);
CREATE TABLE IF NOT EXISTS idemgate_fences (
    tenant        text        NOT NULL,
    resource      text        NOT NULL,
    fencing_token bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, resource)
);`

// DB begins transactions. *pgxpool.Pool, *pgx.Conn and pgx.Tx (a savepoint)
// satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrStale is what every stale-token error matches with errors.Is.
var ErrStale = errors.New("receiver: stale fencing token")

// StaleError refuses a delivery whose fencing token is older than one
// already applied to the same resource: a newer attempt has taken the
// resource, so this one must not write.
type StaleError struct {
	Tenant   string
	Resource string
	// Token is the refused token, Latest the newest applied one.
	Token  int64
	Latest int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("receiver: stale fencing token %d for %s/%s (latest %d)", e.Token, e.Tenant, e.Resource, e.Latest)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// EnsureSchema runs Schema, then each of more (the service's own tables),
// in one transaction. Replicas starting together queue on an advisory
// lock, because concurrent CREATE TABLE IF NOT EXISTS of one table can fail.
func EnsureSchema(ctx context.Context, db DB, more ...string) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('idemgate_receiver_schema'))`); err != nil {
			return err
		}
		for _, ddl := range append([]string{Schema}, more...) {
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("receiver: ensure schema: %w", err)
	}
	return nil
}

// Apply runs fn at most once per (d.Tenant, d.BusinessKey), fenced per
// (d.Tenant, resource), in one transaction on db that also holds fn's writes:
//
//   - a token older than the newest applied to the resource is refused with
//     a *StaleError (errors.Is(err, ErrStale)) and nothing is written; an
//     equal token passes, as the same owner may deliver twice;
//   - a key already applied returns its stored result_ref with
//     replayed=true, without calling fn;
//   - otherwise fn runs in tx and its result_ref is recorded with the key.
//
// An error from fn rolls everything back, so the key stays unapplied and a
// retry runs fn again. resource "" means d.BusinessKey. Concurrent
// deliveries of one key queue on its primary key: one applies, the others
// return its result_ref.
func Apply(ctx context.Context, db DB, d Delivery, resource string,
	fn func(ctx context.Context, tx pgx.Tx) (resultRef string, err error),
) (resultRef string, replayed bool, err error) {
	if d.BusinessKey == "" {
		return "", false, fmt.Errorf("%w: empty business key", ErrEnvelope)
	}
	if resource == "" {
		resource = d.BusinessKey
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := takeFence(ctx, tx, d, resource); err != nil {
			return err
		}
		claimed, existing, err := claim(ctx, tx, d, resource)
		if err != nil {
			return err
		}
		if !claimed {
			resultRef, replayed = existing, true
			return nil
		}
		resultRef, err = fn(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
UPDATE idemgate_deliveries SET result_ref = $3
 WHERE tenant = $1 AND idempotency_key = $2`, d.Tenant, d.BusinessKey, resultRef)
		if err != nil {
			return fmt.Errorf("receiver: record %s/%s: %w", d.Tenant, d.BusinessKey, err)
		}
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("receiver: apply %s/%s: %w", d.Tenant, d.BusinessKey, err)
	}
	return resultRef, replayed, nil
}

// takeFence records d's token as the newest for the resource, or refuses
// it. It keeps the fence row locked until tx ends, so writes to one
// resource by two attempts never interleave.
func takeFence(ctx context.Context, tx pgx.Tx, d Delivery, resource string) error {
	// ON CONFLICT DO UPDATE locks the existing row even when its WHERE
	// refuses the update, which then returns no row.
	var applied int64
	err := tx.QueryRow(ctx, `
INSERT INTO idemgate_fences AS f (tenant, resource, fencing_token) VALUES ($1, $2, $3)
ON CONFLICT (tenant, resource) DO UPDATE SET fencing_token = excluded.fencing_token, updated_at = now()
 WHERE f.fencing_token <= excluded.fencing_token
RETURNING f.fencing_token`, d.Tenant, resource, d.FencingToken).Scan(&applied)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("receiver: fence %s/%s: %w", d.Tenant, resource, err)
	}
	var latest int64
	if err := tx.QueryRow(ctx, `SELECT fencing_token FROM idemgate_fences WHERE tenant = $1 AND resource = $2`,
		d.Tenant, resource).Scan(&latest); err != nil {
		return fmt.Errorf("receiver: fence %s/%s: read latest token: %w", d.Tenant, resource, err)
	}
	return &StaleError{Tenant: d.Tenant, Resource: resource, Token: d.FencingToken, Latest: latest}
}

// claim inserts the key's row, or reports the result_ref of the delivery
// that already holds it. A concurrent claim of the same key waits on the
// primary key until the first transaction ends: after a commit it finds the
// row, after a rollback it inserts.
func claim(ctx context.Context, tx pgx.Tx, d Delivery, resource string) (claimed bool, existingRef string, err error) {
	tag, err := tx.Exec(ctx, `
INSERT INTO idemgate_deliveries (tenant, idempotency_key, resource, fencing_token, job_id, result_ref)
VALUES ($1, $2, $3, $4, $5, '')
ON CONFLICT (tenant, idempotency_key) DO NOTHING`, d.Tenant, d.BusinessKey, resource, d.FencingToken, d.JobID)
	if err != nil {
		return false, "", fmt.Errorf("receiver: claim %s/%s: %w", d.Tenant, d.BusinessKey, err)
	}
	if tag.RowsAffected() == 1 {
		return true, "", nil
	}
	err = tx.QueryRow(ctx, `SELECT result_ref FROM idemgate_deliveries WHERE tenant = $1 AND idempotency_key = $2`,
		d.Tenant, d.BusinessKey).Scan(&existingRef)
	if err != nil {
		return false, "", fmt.Errorf("receiver: read %s/%s: %w", d.Tenant, d.BusinessKey, err)
	}
	return false, existingRef, nil
}
