package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrStaleToken is what every stale-token error matches with errors.Is.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError reports a write refused because a newer token has already
// written to the resource: its owner has lost the resource to someone else.
type StaleTokenError struct {
	Resource string
	// Token is the refused token.
	Token int64
	// Latest is the newest token known to the fence, 0 when the refusal came
	// from a guarded statement that touched no row (Expect).
	Latest int64
}

func (e *StaleTokenError) Error() string {
	if e.Latest > 0 {
		return fmt.Sprintf("fence: stale fencing token %d for %q (latest %d)", e.Token, e.Resource, e.Latest)
	}
	return fmt.Sprintf("fence: stale fencing token %d for %q", e.Token, e.Resource)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Querier runs one statement returning rows. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// clockFloor is PostgreSQL's clock in microseconds since 1970, the least
// token a draw gives. Counting alone restarts a resource at 1 when its
// counter row is lost with the last writes before a failover (an async
// standby promoted behind its primary, a restore from backup), and a
// receiver could not refuse the new owner's re-run from the old one's. The
// clock has moved on since any lost token was drawn, so the first draw
// after the loss is still higher; the counter keeps draws rising when the
// clock does not (two draws in one microsecond, a clock stepped back).
//
// now(), the transaction's start, not clock_timestamp(): a lost token was
// drawn in a transaction that started before the promotion, and any draw on
// the promoted primary starts after it, so transaction time already
// orders them, and one value per statement keeps a draw that reads it
// twice consistent. Microseconds since 1970 stay below 2^53 until the year
// 2255: a JavaScript number holds every token exactly.
const clockFloor = `(extract(epoch FROM now()) * 1000000)::bigint`

// NextStatement is the statement behind Next, for a caller that draws the
// token inside a larger statement (as a common table expression) so that
// drawing it and using it commit together: $1 is the resource, and it
// returns one row with the column token.
const NextStatement = `
INSERT INTO fencing_tokens AS f (resource, token) VALUES ($1, ` + clockFloor + `)
ON CONFLICT (resource) DO UPDATE SET token = greatest(f.token + 1, ` + clockFloor + `), updated_at = now()
RETURNING f.token`

// NextStatementIf is NextStatement drawn only when cond, an SQL condition
// over the enclosing statement's earlier expressions, holds: a statement
// that decides first whether it will use a token (and locks what decides
// it before the resource's counter) draws none when it will not.
func NextStatementIf(cond string) string {
	return `
INSERT INTO fencing_tokens AS f (resource, token) SELECT $1, ` + clockFloor + ` WHERE ` + cond + `
ON CONFLICT (resource) DO UPDATE SET token = greatest(f.token + 1, ` + clockFloor + `), updated_at = now()
RETURNING f.token`
}

// Next returns the next fencing token for resource: one more than the last
// token issued, whoever asked, or the database clock in microseconds since
// 1970 when that is higher (always, the first time). Concurrent callers
// queue on the resource's row, so no two get the same token, and a token
// never repeats even when the database lost its last writes in a failover.
// Tokens are large numbers: store them as 64-bit integers.
func Next(ctx context.Context, q Querier, resource string) (int64, error) {
	var token int64
	if err := q.QueryRow(ctx, NextStatement, resource).Scan(&token); err != nil {
		return 0, fmt.Errorf("fence: next token for %q: %w", resource, err)
	}
	return token, nil
}

// Check is the fence for a write in tx: it accepts token unless a newer
// token has already been accepted for resource, records it as the newest,
// and keeps the resource's fence row locked until tx ends, so the writes
// that follow in tx cannot interleave with another owner's. It returns a
// *StaleTokenError for a token older than the newest accepted one.
//
// A token equal to the newest accepted one passes again: the owner of a
// token may write in several transactions. An older token never passes once
// a newer one has, whatever the outcome of the newer owner's work, because
// the newer token's Check commits with its transaction.
//
// q must be the transaction that does the business writes; on a pool each
// statement commits by itself and the lock is gone before the writes.
func Check(ctx context.Context, q Querier, resource string, token int64) error {
	if token <= 0 {
		return fmt.Errorf("fence: check %q: token %d is not a fencing token", resource, token)
	}
	// ON CONFLICT DO UPDATE locks the existing row even when the WHERE
	// refuses the update.
	const accept = `
INSERT INTO fence_accepted AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, accepted_at = now()
WHERE f.token <= excluded.token
RETURNING f.token`
	var accepted int64
	err := q.QueryRow(ctx, accept, resource, token).Scan(&accepted)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fence: check %q: %w", resource, err)
	}
	var latest int64
	if err := q.QueryRow(ctx, `SELECT token FROM fence_accepted WHERE resource = $1`, resource).Scan(&latest); err != nil {
		return fmt.Errorf("fence: check %q: read latest token: %w", resource, err)
	}
	return &StaleTokenError{Resource: resource, Token: token, Latest: latest}
}

// Supersede draws the next token for resource and records it as the
// newest accepted, in one statement, without writing anything else: from
// its commit on, Check refuses every token drawn before it. An owner whose
// Check has already run holds the fence row until its transaction ends,
// so Supersede waits for that transaction: the owner's writes either
// commit before Supersede does or are refused. A cancel uses it to stop an
// attempt in flight from writing. It returns the token drawn; run it in
// the transaction whose commit must fence the older owners out.
func Supersede(ctx context.Context, q Querier, resource string) (int64, error) {
	const supersede = `
WITH next AS (` + NextStatement + `
)
INSERT INTO fence_accepted AS f (resource, token) SELECT $1, token FROM next
ON CONFLICT (resource) DO UPDATE SET token = GREATEST(f.token, excluded.token), accepted_at = now()
RETURNING f.token`
	var token int64
	if err := q.QueryRow(ctx, supersede, resource).Scan(&token); err != nil {
		return 0, fmt.Errorf("fence: supersede %q: %w", resource, err)
	}
	return token, nil
}

// Latest returns the newest token accepted for resource by Check, 0 if none.
func Latest(ctx context.Context, q Querier, resource string) (int64, error) {
	var token int64
	err := q.QueryRow(ctx, `SELECT token FROM fence_accepted WHERE resource = $1`, resource).Scan(&token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("fence: latest token for %q: %w", resource, err)
	}
	return token, nil
}

// Expect turns a fenced statement that touched no row, such as
// `UPDATE … WHERE … AND fencing_token < $token`, into a *StaleTokenError.
// The statement's own WHERE must tell "stale" from "no such row" (insert
// the row first if it may be absent).
func Expect(tag pgconn.CommandTag, resource string, token int64) error {
	if tag.RowsAffected() == 0 {
		return &StaleTokenError{Resource: resource, Token: token}
	}
	return nil
}

// Stale returns the *StaleTokenError a handler reports when its own fenced
// SQL finds that a newer token has written.
func Stale(resource string, token, latest int64) error {
	return &StaleTokenError{Resource: resource, Token: token, Latest: latest}
}
