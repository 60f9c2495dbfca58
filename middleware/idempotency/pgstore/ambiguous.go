package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// An ambiguous commit. A write whose context ended after it was sent may have
// committed all the same, behind a synchronous standby. Its backend is ended
// and waited for, then its row is read back under WithResolveTimeout.
// Design: docs/design/postgres-store.md#an-ambiguous-commit

// ambiguous reports whether a write that returned err, sent to backend
// pid (0: never sent), may have committed although its caller cannot know:
// its context ended, and neither PostgreSQL answered with the statement's
// error nor a batch reported that it rolled back.
func ambiguous(ctx context.Context, err error, pid uint32) bool {
	if err == nil || pid == 0 || ctx.Err() == nil {
		return false
	}
	var be *batchError
	if errors.As(err, &be) && !be.committed {
		return false
	}
	var pe *pgconn.PgError
	return !errors.As(err, &pe)
}

// defaultResolveTimeout bounds the settling of one ambiguous write: the
// termination and the read-back.
const defaultResolveTimeout = 2 * time.Second

// WithResolveTimeout bounds how long the Store settles a write whose
// context ended while it may have committed (default 2s); 0 turns the
// settling off: such a write returns its context's error. Turn it off when
// the pool goes through a transaction pooler (PgBouncer with pool_mode =
// transaction): the backend ids its connections report are the pooler's,
// not PostgreSQL's.
func WithResolveTimeout(d time.Duration) Option {
	return func(s *Store) { s.resolveTimeout = d }
}

// terminateSQL ends backend $1 and waits up to $2 milliseconds for it to
// exit. An idle backend has finished its statement (committed or rolled
// back) and is left alone; no row means there is nothing to wait for.
const terminateSQL = `
SELECT pg_terminate_backend(pid, $2)
  FROM pg_stat_activity
 WHERE pid = $1 AND datname = current_database() AND state <> 'idle'`

// readBackSQL reads a record whatever its expiry, with the owner the
// record's view hides once a claim ends and whether the claim was a
// take-over (as claimSQL reports it).
const readBackSQL = `
SELECT owner, created_at < updated_at, fingerprint, state, fencing_token, owner, lease_until,
	coalesce(response_status, 0), response_headers, response_body, body_omitted, created_at, updated_at, expires_at
FROM idempotency_records
WHERE tenant = $1 AND route = $2 AND key = $3`

// settle ends backend pid, the one an ambiguous write was sent to, and
// reads back the record of scope. found is false when there is no record.
func (s *Store) settle(ctx context.Context, pid uint32, scope idempotency.Scope) (r row, owner string, found bool, err error) {
	if s.resolveTimeout <= 0 {
		return row{}, "", false, errors.New("settling ambiguous writes is off")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolveTimeout)
	defer cancel()
	var ended bool
	switch err := s.pool.QueryRow(ctx, terminateSQL, int64(pid), (s.resolveTimeout / 2).Milliseconds()).Scan(&ended); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return row{}, "", false, fmt.Errorf("end backend %d: %w", pid, err)
	case !ended:
		return row{}, "", false, fmt.Errorf("backend %d did not end within %s", pid, s.resolveTimeout/2)
	}
	err = s.pool.QueryRow(ctx, readBackSQL, scope.Tenant, scope.Route, scope.Key).Scan(
		&owner, &r.takeover, &r.rec.Fingerprint, &r.state, &r.rec.FencingToken, &r.rec.Owner, &r.lease,
		&r.status, &r.headers, &r.body, &r.omitted, &r.rec.CreatedAt, &r.rec.UpdatedAt, &r.rec.ExpiresAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return row{}, "", false, nil
	case err != nil:
		return row{}, "", false, fmt.Errorf("read back: %w", err)
	}
	return r, owner, true, nil
}

// resolveClaim settles a claim whose context ended after it was sent: the
// record in flight under req.Owner is the claim, committed; anything else
// means it did not take, and the claim's own error (werr) stands, as for a
// claim that was never answered.
func (s *Store) resolveClaim(ctx context.Context, pid uint32, req idempotency.ClaimRequest, werr error) (idempotency.ClaimResult, error) {
	r, owner, found, err := s.settle(ctx, pid, req.Scope)
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("pgstore: claim: %w (not settled: %v)", werr, err)
	}
	if !found || owner != req.Owner || r.state != string(idempotency.StateInFlight) {
		return idempotency.ClaimResult{}, fmt.Errorf("pgstore: claim: %w (settled: not claimed)", werr)
	}
	rec, err := r.record(req.Scope)
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	return idempotency.ClaimResult{Claimed: true, TakeOver: r.takeover, Record: rec}, nil
}

// resolveEnd settles a completion, release or hold (state) whose context
// ended after it was sent: the record in state under owner is the write,
// committed (nil); still in flight under owner, it did not commit and the
// write's own error (werr) stands, so the caller tries again; under
// another owner, or gone, the claim was lost (ErrNotOwner).
func (s *Store) resolveEnd(ctx context.Context, pid uint32, op string, scope idempotency.Scope, owner string, state idempotency.State, werr error) error {
	r, got, found, err := s.settle(ctx, pid, scope)
	switch {
	case err != nil:
		return fmt.Errorf("pgstore: %s: %w (not settled: %v)", op, werr, err)
	case found && got == owner && r.state == string(state):
		return nil
	case found && got == owner && r.state == string(idempotency.StateInFlight):
		return fmt.Errorf("pgstore: %s: %w (settled: not stored)", op, werr)
	}
	return idempotency.ErrNotOwner
}
