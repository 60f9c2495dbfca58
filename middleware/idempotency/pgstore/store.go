package pgstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/internal/headerjson"
)

var (
	_ idempotency.Store   = (*Store)(nil)
	_ idempotency.Watcher = (*Store)(nil)
	_ idempotency.Janitor = (*Store)(nil)
)

// DefaultChannel is the LISTEN/NOTIFY channel a Store uses unless
// WithChannel says otherwise.
const DefaultChannel = "idemgate_idempotency"

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("pgstore: store closed")

// Store is an idempotency.Store on PostgreSQL. It is safe for concurrent
// use. The pool belongs to the caller; Close only stops what the Store
// started itself (the listener behind Watch).
type Store struct {
	pool         *pgxpool.Pool
	channel      string
	log          *slog.Logger
	lanes        int
	maxBatch     int
	batchTimeout time.Duration
	batch        *batcher // nil: batching off
	instance     string   // names this gateway in the claim ledger
	// resolveTimeout bounds the settling of an ambiguous write
	// (ambiguous.go). Zero turns settling off.
	resolveTimeout time.Duration

	mu       sync.Mutex
	watchers map[string]map[*watcher]struct{} // by scope id
	started  bool
	closed   bool
	cancel   context.CancelFunc // stops the listener
	wg       sync.WaitGroup     // the listener goroutine
	pid      atomic.Uint32      // backend pid of the live listener connection, 0 when none
	// listenConfig, when set, is the listener's own connection, a direct
	// one; nil: the listener takes a connection out of the pool.
	listenConfig *pgx.ConnConfig
	deaf         atomic.Bool // notifications cannot reach the listener: Watch leaves the caller to poll
}

// Option configures a Store.
type Option func(*Store)

// WithChannel sets the LISTEN/NOTIFY channel (default DefaultChannel).
// Channels are database-wide, not per schema: deployments that share a
// database and must not wake each other's watchers use different channels
// (a stray wake-up is harmless, it only costs a re-check). It panics on an
// empty name or one longer than PostgreSQL's 63-byte identifier limit,
// which PostgreSQL would otherwise reject on every Complete.
func WithChannel(name string) Option {
	if name == "" || len(name) > 63 {
		panic(fmt.Sprintf("pgstore: channel name %q must be 1 to 63 bytes", name))
	}
	return func(s *Store) { s.channel = name }
}

// WithLogger sets where the Store reports what it handles itself: a lost
// listener connection, a failed janitor batch (default slog.Default(); nil
// discards).
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return func(s *Store) { s.log = l }
}

// WithListenConfig gives the listener behind Watch a connection of its
// own, opened with cfg, instead of one taken out of the pool. cfg is a
// direct connection to the pool's database. It is needed when the pool
// goes through a transaction pooler (PgBouncer with pool_mode =
// transaction): a LISTEN holds a session, and such a pooler lends the
// server connection to other clients as soon as the statement ends, so
// the pool's connections never hear a notification. Without it, a Store
// whose listener hears nothing logs so once and leaves waiting duplicates
// to poll. cfg must come from pgx.ParseConfig; the Store copies it.
func WithListenConfig(cfg *pgx.ConnConfig) Option {
	cfg = cfg.Copy()
	return func(s *Store) { s.listenConfig = cfg }
}

// WithInstance names this gateway instance in the claim ledger
// (idempotency_claims.instance). Default "<hostname>:<pid>".
func WithInstance(name string) Option {
	return func(s *Store) { s.instance = name }
}

func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil {
		host = "gateway"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// New returns a Store on pool, whose database has the migrations applied.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{
		pool:           pool,
		instance:       defaultInstance(),
		channel:        DefaultChannel,
		log:            slog.Default(),
		watchers:       make(map[string]map[*watcher]struct{}),
		lanes:          defaultLanes,
		maxBatch:       defaultMaxBatch,
		batchTimeout:   defaultBatchTimeout,
		resolveTimeout: defaultResolveTimeout,
	}
	for _, opt := range opts {
		opt(s)
	}
	if s.lanes > 0 && s.maxBatch > 1 {
		s.batch = newBatcher(pool, s.lanes, s.maxBatch, s.batchTimeout)
	}
	return s
}

// clockToken is PostgreSQL's clock in microseconds since 1970, the least
// fencing token a claim gets. now(), the transaction's start, not
// clock_timestamp(): a token lost in a failover was issued in a transaction
// that started before the promotion, and every claim on the promoted
// primary starts after it, so transaction time already orders them; one
// value per statement keeps the claim's reads of it consistent, and the
// previous token plus one keeps the claims of one batch (one transaction,
// one now()) rising. Microseconds since 1970 stay below 2^53 until the
// year 2255, so a JavaScript number holds every token exactly.
const clockToken = `(extract(epoch FROM now()) * 1000000)::bigint`

// maxRaceRetries bounds how often Claim runs again when a concurrent writer
// changed the row between its snapshot and its upsert.
const maxRaceRetries = 5

// Claim is one statement. It first reads the row (cur); only when there is
// none, or the row looks claimable, does it try the upsert, which takes the
// row over when allowed. A replay or a duplicate of a request in flight is
// thus a plain read: an ON CONFLICT DO UPDATE locks the existing row even
// when its WHERE refuses the update, so every replay of one key would queue
// behind the others.
//
// cur reads the statement's snapshot, which under READ COMMITTED can
// predate a row a concurrent claim inserted (no row at all) or changed (a
// row that looks claimable although the upsert, which sees the latest
// version, refused it): both mean "raced", and the statement runs again
// with a fresh snapshot. A row that looked unclaimable in the snapshot is
// answered from it: what it says was true at the snapshot, as if this
// request had come a moment earlier.
//
// The fencing token is the record's previous token plus one or the
// database clock in microseconds (clockToken), whichever is higher: for a
// new record, a take-over and a record whose retention passed alike, as
// the Redis store does. Counting alone would restart a key at 1 when a
// failover to a standby that lacked the last writes lost its row, and the
// upstream could not refuse the re-run, which carries the token the lost
// claim had; the clock has moved on since any lost token was issued. A
// take-over keeps created_at and a fresh record sets it to now(), so
// created_at < updated_at tells a take-over (tokens say nothing now). A
// record created afresh sets its request counts (counts.go) back to zero;
// a take-over keeps them.
const claimSQL = `
WITH cur AS (
	SELECT fingerprint, state, fencing_token, owner, lease_until,
		response_status, response_headers, response_body, body_omitted, created_at, updated_at, expires_at,
		(state <> 'in_flight' OR lease_until <= now())
		AND (expires_at <= now() OR (fingerprint = $4 AND state IN ('released', 'in_flight'))) AS claimable
	FROM idempotency_records
	WHERE tenant = $1 AND route = $2 AND key = $3
), ins AS (
	INSERT INTO idempotency_records AS r
		(tenant, route, key, fingerprint, state, owner, fencing_token, lease_until, expires_at)
	SELECT $1, $2, $3, $4, 'in_flight', $5::text, ` + clockToken + `, now() + $6::interval, now() + greatest($6::interval, $7::interval)
	WHERE NOT EXISTS (SELECT 1 FROM cur WHERE NOT claimable)
	ON CONFLICT (tenant, route, key) DO UPDATE SET
		fingerprint      = excluded.fingerprint,
		state            = 'in_flight',
		owner            = excluded.owner,
		fencing_token    = greatest(r.fencing_token + 1, ` + clockToken + `),
		lease_until      = excluded.lease_until,
		response_status  = NULL,
		response_headers = NULL,
		response_body    = NULL,
		body_omitted     = false,
		watched          = CASE WHEN r.expires_at <= now() THEN false ELSE r.watched END,
		created_at       = CASE WHEN r.expires_at <= now() THEN now() ELSE r.created_at END,
		requests_new      = CASE WHEN r.expires_at <= now() THEN 0 ELSE r.requests_new END,
		requests_replayed = CASE WHEN r.expires_at <= now() THEN 0 ELSE r.requests_replayed END,
		requests_conflict = CASE WHEN r.expires_at <= now() THEN 0 ELSE r.requests_conflict END,
		requests_mismatch = CASE WHEN r.expires_at <= now() THEN 0 ELSE r.requests_mismatch END,
		requests_released = CASE WHEN r.expires_at <= now() THEN 0 ELSE r.requests_released END,
		requests_first_at = CASE WHEN r.expires_at <= now() THEN NULL ELSE r.requests_first_at END,
		requests_last_at  = CASE WHEN r.expires_at <= now() THEN NULL ELSE r.requests_last_at END,
		updated_at       = now(),
		expires_at       = excluded.expires_at
	WHERE (r.state <> 'in_flight' OR r.lease_until <= now())
	  AND (r.expires_at <= now()
	       OR (r.fingerprint = excluded.fingerprint AND r.state IN ('released', 'in_flight')))
	RETURNING fingerprint, fencing_token, owner, lease_until, created_at, updated_at, expires_at, created_at < updated_at AS takeover
), taken AS (
	UPDATE idempotency_claims c SET outcome = 'taken_over', ended_at = now()
	FROM ins
	WHERE c.tenant = $1 AND c.route = $2 AND c.key = $3 AND c.outcome IS NULL
), ledger AS (
	INSERT INTO idempotency_claims (tenant, route, key, fencing_token, owner, instance)
	SELECT $1, $2, $3, fencing_token, owner, $8::text FROM ins
)
SELECT true, false, takeover, fingerprint, 'in_flight', fencing_token, owner, lease_until,
	0, NULL::jsonb, NULL::bytea, false, created_at, updated_at, expires_at
FROM ins
UNION ALL
SELECT false, coalesce(claimable, false), created_at < updated_at, fingerprint, state, fencing_token, owner, lease_until,
	coalesce(response_status, 0), response_headers, response_body, body_omitted, created_at, updated_at, expires_at
FROM cur
WHERE NOT EXISTS (SELECT 1 FROM ins)`

// Claim claims req.Scope for req.Owner. When the answer to a claim is lost
// with its connection, Claim runs it again; finding the record in flight
// under req.Owner then means the first attempt committed, and it reports
// that claim.
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if req.Owner == "" {
		return idempotency.ClaimResult{}, errors.New("pgstore: claim: empty owner")
	}
	if req.Lease <= 0 {
		return idempotency.ClaimResult{}, fmt.Errorf("pgstore: claim: lease %v is not positive", req.Lease)
	}
	sc := req.Scope
	var r row
	scan := func(row pgx.Row) error {
		r = row0
		return row.Scan(&r.claimed, &r.stale, &r.takeover, &r.rec.Fingerprint, &r.state, &r.rec.FencingToken, &r.rec.Owner,
			&r.lease, &r.status, &r.headers, &r.body, &r.omitted,
			&r.rec.CreatedAt, &r.rec.UpdatedAt, &r.rec.ExpiresAt)
	}
	races, lost, viaBatch := 0, 0, true
	for {
		pid, err := s.queryRow(ctx, viaBatch, sc, claimSQL, scan,
			sc.Tenant, sc.Route, sc.Key, req.Fingerprint, req.Owner, req.Lease, req.Retention, s.instance)
		if ambiguous(ctx, err, pid) {
			return s.resolveClaim(ctx, pid, req, err)
		}
		if err == nil {
			rec, err := r.record(sc)
			if err != nil {
				return idempotency.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
			}
			mine := rec.State == idempotency.StateInFlight && rec.Owner == req.Owner
			if r.claimed || mine {
				return idempotency.ClaimResult{Claimed: true, TakeOver: r.takeover, Record: rec}, nil
			}
			if !r.stale {
				return idempotency.ClaimResult{Record: rec}, nil
			}
		} else if !errors.Is(err, pgx.ErrNoRows) {
			if rerun(err, &viaBatch, &lost) || s.retryable(ctx, err, &lost) {
				continue
			}
			return idempotency.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
		}
		races++
		if races >= maxRaceRetries {
			return idempotency.ClaimResult{}, fmt.Errorf("pgstore: claim: record changed concurrently %d times in a row", races)
		}
	}
}

// Renew keeps expires_at at or after the lease so that neither Get nor the
// janitor ever treats a live claim as expired.
const renewSQL = `
UPDATE idempotency_records
SET lease_until = now() + $5::interval,
    expires_at  = greatest(expires_at, now() + $5::interval),
    updated_at  = now()
WHERE tenant = $1 AND route = $2 AND key = $3 AND owner = $4 AND state = 'in_flight'`

// Renew extends the owner's lease to lease from now.
func (s *Store) Renew(ctx context.Context, scope idempotency.Scope, owner string, lease time.Duration) error {
	var lost int
	for {
		tag, err := s.pool.Exec(ctx, renewSQL, scope.Tenant, scope.Route, scope.Key, owner, lease)
		if err != nil {
			if s.retryable(ctx, err, &lost) {
				continue
			}
			return fmt.Errorf("pgstore: renew: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return idempotency.ErrNotOwner
		}
		return nil
	}
}

// completeSQL notifies only when a duplicate watches the record (see
// Watch). Its $10 is set when the statement runs again after its
// connection was lost: a record already completed by this owner is then the
// first attempt's work, not a second completion.
const completeSQL = `
WITH done AS (
UPDATE idempotency_records
SET state            = 'completed',
    lease_until      = NULL,
    response_status  = $5,
    response_headers = $6,
    response_body    = $7,
    body_omitted     = $8,
    updated_at       = now(),
    expires_at       = now() + $9::interval
WHERE tenant = $1 AND route = $2 AND key = $3 AND owner = $4
  AND (state = 'in_flight' OR ($10 AND state = 'completed'))
RETURNING watched
), ledger AS (
	UPDATE idempotency_claims SET outcome = 'completed', ended_at = now(), status = $5
	WHERE tenant = $1 AND route = $2 AND key = $3 AND owner = $4 AND outcome IS NULL
	  AND EXISTS (SELECT 1 FROM done)
)
SELECT CASE WHEN watched THEN pg_notify($11, $12) END FROM done`

// Complete stores resp and ends the claim. With BodyOmitted the body is not
// stored even when resp carries one.
func (s *Store) Complete(ctx context.Context, scope idempotency.Scope, owner string, resp idempotency.Response, retention time.Duration) error {
	// json.RawMessage, not []byte: in the exec and simple protocol modes,
	// which run through a transaction pooler, a []byte goes as bytea text
	// (\x…), which jsonb refuses. nil is SQL NULL: no headers.
	var headers json.RawMessage
	if resp.Header != nil {
		headers = headerjson.Append(make([]byte, 0, headerjson.Size(resp.Header)), resp.Header)
	}
	body := resp.Body
	if resp.BodyOmitted {
		body = nil
	}
	id := scopeID(scope)
	lost, viaBatch := 0, true
	for {
		tag, pid, err := s.exec(ctx, viaBatch, scope, completeSQL,
			scope.Tenant, scope.Route, scope.Key, owner,
			resp.Status, headers, body, resp.BodyOmitted, retention,
			lost > 0, s.channel, id)
		if ambiguous(ctx, err, pid) {
			return s.resolveEnd(ctx, pid, "complete", scope, owner, idempotency.StateCompleted, err)
		}
		if err != nil {
			if rerun(err, &viaBatch, &lost) || s.retryable(ctx, err, &lost) {
				continue
			}
			return fmt.Errorf("pgstore: complete: %w", err)
		}
		if tag.RowsAffected() == 0 {
			status := resp.Status
			s.refused(ctx, scope, owner, "completion refused: the claim was taken over", &status)
			return idempotency.ErrNotOwner
		}
		return nil
	}
}

// endSQL releases a claim or holds it as unknown ($5). Like completeSQL, $6
// marks a run after a lost connection.
const endSQL = `
WITH done AS (
UPDATE idempotency_records
SET state = $5, lease_until = NULL, updated_at = now()
WHERE tenant = $1 AND route = $2 AND key = $3 AND owner = $4
  AND (state = 'in_flight' OR ($6 AND state = $5))
RETURNING watched
), ledger AS (
	UPDATE idempotency_claims SET outcome = $5, ended_at = now(), reason = NULLIF($9::text, '')
	WHERE tenant = $1 AND route = $2 AND key = $3 AND owner = $4 AND outcome IS NULL
	  AND EXISTS (SELECT 1 FROM done)
)
SELECT CASE WHEN watched THEN pg_notify($7, $8) END FROM done`

// refusedSQL records, in the claim ledger, an owner whose completion or
// release came after a newer claim took the record over. It is a write of
// its own, on that rare path only.
const refusedSQL = `
UPDATE idempotency_claims SET outcome = 'refused', ended_at = coalesce(ended_at, now()),
	reason = $5, status = $6
WHERE tenant = $1 AND route = $2 AND key = $3 AND owner = $4 AND (outcome IS NULL OR outcome = 'taken_over')`

// refused notes a refused completion or release in the claim ledger; the
// caller's ErrNotOwner stands whatever happens to the note.
func (s *Store) refused(ctx context.Context, scope idempotency.Scope, owner, reason string, status *int) {
	if _, err := s.pool.Exec(ctx, refusedSQL, scope.Tenant, scope.Route, scope.Key, owner, reason, status); err != nil {
		s.log.WarnContext(ctx, "pgstore: recording a refused completion in the claim ledger failed", "error", err)
	}
}

// Release marks the attempt as not processed; the next claim with the same
// fingerprint takes the record over.
func (s *Store) Release(ctx context.Context, scope idempotency.Scope, owner string) error {
	return s.end(ctx, "release", scope, owner, idempotency.StateReleased)
}

// MarkUnknown holds the ambiguous outcome until Resolve.
func (s *Store) MarkUnknown(ctx context.Context, scope idempotency.Scope, owner string) error {
	return s.end(ctx, "mark unknown", scope, owner, idempotency.StateUnknown)
}

func (s *Store) end(ctx context.Context, op string, scope idempotency.Scope, owner string, state idempotency.State) error {
	id := scopeID(scope)
	lost, viaBatch := 0, true
	for {
		tag, pid, err := s.exec(ctx, viaBatch, scope, endSQL,
			scope.Tenant, scope.Route, scope.Key, owner, string(state), lost > 0, s.channel, id, idempotency.ReleaseReason(ctx))
		if ambiguous(ctx, err, pid) {
			return s.resolveEnd(ctx, pid, op, scope, owner, state, err)
		}
		if err != nil {
			if rerun(err, &viaBatch, &lost) || s.retryable(ctx, err, &lost) {
				continue
			}
			return fmt.Errorf("pgstore: %s: %w", op, err)
		}
		if tag.RowsAffected() == 0 {
			s.refused(ctx, scope, owner, op+" refused: the claim was taken over", nil)
			return idempotency.ErrNotOwner
		}
		return nil
	}
}

const getSQL = `
SELECT fingerprint, state, fencing_token, owner, lease_until,
	coalesce(response_status, 0), response_headers, response_body, body_omitted, created_at, updated_at, expires_at
FROM idempotency_records
WHERE tenant = $1 AND route = $2 AND key = $3 AND expires_at > now()`

// Get returns the live record for scope, or idempotency.ErrNotFound.
func (s *Store) Get(ctx context.Context, scope idempotency.Scope) (idempotency.Record, error) {
	var (
		r    row
		lost int
	)
	for {
		r = row{}
		err := s.pool.QueryRow(ctx, getSQL, scope.Tenant, scope.Route, scope.Key).Scan(
			&r.rec.Fingerprint, &r.state, &r.rec.FencingToken, &r.rec.Owner, &r.lease,
			&r.status, &r.headers, &r.body, &r.omitted,
			&r.rec.CreatedAt, &r.rec.UpdatedAt, &r.rec.ExpiresAt)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return idempotency.Record{}, idempotency.ErrNotFound
		case err != nil:
			if s.retryable(ctx, err, &lost) {
				continue
			}
			return idempotency.Record{}, fmt.Errorf("pgstore: get: %w", err)
		}
		rec, err := r.record(scope)
		if err != nil {
			return idempotency.Record{}, fmt.Errorf("pgstore: get: %w", err)
		}
		return rec, nil
	}
}

// Deleting wakes watchers too: a duplicate waiting for the record can
// claim it at once.
const deleteSQL = `
DELETE FROM idempotency_records
WHERE tenant = $1 AND route = $2 AND key = $3
RETURNING pg_notify($4, $5)`

// Delete removes the record for scope whatever its state; a missing record
// is not an error.
func (s *Store) Delete(ctx context.Context, scope idempotency.Scope) error {
	id := scopeID(scope)
	var lost int
	for {
		_, err := s.pool.Exec(ctx, deleteSQL, scope.Tenant, scope.Route, scope.Key, s.channel, id)
		if err != nil {
			if s.retryable(ctx, err, &lost) {
				continue
			}
			return fmt.Errorf("pgstore: delete: %w", err)
		}
		return nil
	}
}

// resolveSQL reports the state it saw (NULL: no live record) and whether it
// resolved the record, so one round trip tells ErrNotFound from
// ErrNotUnknown.
const resolveSQL = `
WITH cur AS (
	SELECT state FROM idempotency_records
	WHERE tenant = $1 AND route = $2 AND key = $3 AND expires_at > now()
), u AS (
	UPDATE idempotency_records SET state = 'released', updated_at = now()
	WHERE tenant = $1 AND route = $2 AND key = $3 AND expires_at > now() AND state = 'unknown'
	RETURNING pg_notify($4, $5)
)
SELECT (SELECT state FROM cur), EXISTS (SELECT 1 FROM u)`

// Resolve turns an unknown outcome into a released one.
func (s *Store) Resolve(ctx context.Context, scope idempotency.Scope) error {
	id := scopeID(scope)
	var lost int
	for {
		var (
			state    pgtype.Text
			resolved bool
		)
		err := s.pool.QueryRow(ctx, resolveSQL, scope.Tenant, scope.Route, scope.Key, s.channel, id).Scan(&state, &resolved)
		switch {
		case err != nil:
			if s.retryable(ctx, err, &lost) {
				continue
			}
			return fmt.Errorf("pgstore: resolve: %w", err)
		case resolved:
			return nil
		case !state.Valid:
			return idempotency.ErrNotFound
		case lost > 0 && state.String == string(idempotency.StateReleased):
			// Most likely the lost first attempt; released is what was asked.
			return nil
		default:
			return idempotency.ErrNotUnknown
		}
	}
}

// row receives one record row, in one allocation however many columns
// need a destination. getSQL and claimSQL (after its two flags) share the
// column order.
type row struct {
	claimed, stale, takeover bool // claimSQL only
	rec                      idempotency.Record
	state                    string
	lease                    pgtype.Timestamptz
	status                   int32
	headers                  []byte
	body                     []byte
	omitted                  bool
}

func (r *row) record(scope idempotency.Scope) (idempotency.Record, error) {
	rec := r.rec
	rec.Scope = scope
	rec.State = idempotency.State(r.state)
	if rec.State != idempotency.StateInFlight {
		// The column keeps the last owner; the record reports one only
		// while a claim is held.
		rec.Owner = ""
	}
	if r.lease.Valid {
		rec.LeaseUntil = r.lease.Time
	}
	if rec.State == idempotency.StateCompleted {
		resp := &idempotency.Response{Status: int(r.status), Body: r.body, BodyOmitted: r.omitted}
		if r.headers != nil {
			if err := json.Unmarshal(r.headers, &resp.Header); err != nil {
				return idempotency.Record{}, fmt.Errorf("stored headers: %w", err)
			}
		}
		rec.Response = resp
	}
	return rec, nil
}

// compareScopes is the order in which batched statements lock rows: by
// tenant, route, then key, byte by byte. Every batch and pipeline uses
// it, so none waits for another in a cycle. Comparing the fields builds
// no string.
func compareScopes(a, b idempotency.Scope) int {
	return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Route, b.Route), strings.Compare(a.Key, b.Key))
}

// row0 resets a row before a scan.
var row0 row

// scopeID names a scope in notifications: hex SHA-256 of its parts joined
// by NUL (which PostgreSQL text cannot contain), short enough for NOTIFY's
// 8000-byte payload limit whatever the key length.
func scopeID(s idempotency.Scope) string {
	var buf [256]byte
	b := append(buf[:0], s.Tenant...)
	b = append(b, 0)
	b = append(b, s.Route...)
	b = append(b, 0)
	b = append(b, s.Key...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// retryable reports whether a statement that failed with err should run
// again: the connection it ran on broke (PostgreSQL restarted, the backend
// was terminated, the network dropped it) and ctx is still live. pgxpool
// drops a broken connection, so the next run gets another one; *lost counts
// the runs, bounded by one more than the pool's size so that a pool whose
// every connection died still reaches a fresh one. Every statement here is
// safe to run twice: those that are not idempotent by nature are told it is
// a second run (lost > 0) and recognise their own first write.
func (s *Store) retryable(ctx context.Context, err error, lost *int) bool {
	if ctx.Err() != nil || !connLost(err) {
		return false
	}
	*lost++
	return *lost <= int(s.pool.Stat().MaxConns())+1
}

func connLost(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return false // the database is unreachable: failing fast beats hammering it
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// FATAL ends the session; class 08 is connection_exception, 57P
		// covers admin and crash shutdown.
		return pe.Severity == "FATAL" || pe.SeverityUnlocalized == "FATAL" ||
			strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		(errors.As(err, &ne) && !ne.Timeout())
}
