package pgstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait for something asynchronous; generous on purpose.
const waitFor = 15 * time.Second

func newStore(t testing.TB, pool *pgxpool.Pool) *Store {
	t.Helper()
	s := New(pool, WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	pool := testkit.Pool(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store { return newStore(t, pool) })
}

func claim(t *testing.T, s *Store, scope idempotency.Scope, fp, owner string) idempotency.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), idempotency.ClaimRequest{
		Scope: scope, Fingerprint: fp, Owner: owner, Lease: 30 * time.Second, Retention: time.Hour,
	})
	if err != nil {
		t.Fatalf("Claim(%+v): %v", scope, err)
	}
	return res
}

func count(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM idempotency_records WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", where, err)
	}
	return n
}

func TestJanitorDeletesExpiredRowsInBatches(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := newStore(t, pool)
	ctx := t.Context()

	// expired-1 … expired-25 expired 1 … 25 minutes ago; "dead-lease" is an
	// abandoned claim past its retention; the two live rows must stay, the
	// second even though its expires_at (written here by hand) has passed,
	// because its lease has not.
	const setup = `
INSERT INTO idempotency_records (tenant, route, key, fingerprint, state, owner, fencing_token, lease_until, response_status, expires_at)
SELECT 't', 'r', 'expired-' || i, 'fp', 'completed', 'o', 1, NULL, 200, now() - i * interval '1 minute'
FROM generate_series(1, 25) AS i
UNION ALL SELECT 't', 'r', 'dead-lease', 'fp', 'in_flight', 'o', 1, now() - interval '2 seconds', NULL, now() - interval '1 second'
UNION ALL SELECT 't', 'r', 'live-completed', 'fp', 'completed', 'o', 1, NULL, 200, now() + interval '1 hour'
UNION ALL SELECT 't', 'r', 'live-lease', 'fp', 'in_flight', 'o', 1, now() + interval '1 hour', NULL, now() - interval '1 second'`
	if _, err := pool.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}

	n, err := s.DeleteExpired(ctx, 10)
	if err != nil {
		t.Fatalf("DeleteExpired: %v", err)
	}
	if n != 10 {
		t.Fatalf("DeleteExpired(10) deleted %d rows, want 10", n)
	}
	oldest := make([]string, 0, 10)
	for i := 16; i <= 25; i++ {
		oldest = append(oldest, "expired-"+strconv.Itoa(i))
	}
	if got := count(t, pool, "key = ANY($1)", oldest); got != 0 {
		t.Fatalf("%d of the 10 oldest expired rows are left; the batch must take the oldest first", got)
	}
	if got := count(t, pool, "true"); got != 18 {
		t.Fatalf("%d rows after one batch, want 28-10", got)
	}

	if err := s.RunJanitor(ctx, 0, 4); err == nil {
		t.Fatal("RunJanitor with interval 0: no error")
	}
	// 16 expired rows in batches of 4: only running batches back to back
	// while they come back full clears them within an hour's interval.
	jctx, cancel := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		runErr error
	)
	wg.Go(func() { runErr = s.RunJanitor(jctx, time.Hour, 4) })
	deadline := time.Now().Add(waitFor)
	for count(t, pool, "key <> 'live-completed' AND key <> 'live-lease'") > 0 {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("RunJanitor left expired rows after %s", waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("RunJanitor returned %v after its context ended, want nil", runErr)
	}
	if got := count(t, pool, "key IN ('live-completed', 'live-lease')"); got != 2 {
		t.Fatalf("janitor deleted live rows: %d of 2 left", got)
	}
}

// terminateAll fills pool to its size, terminates every one of its
// backends and waits until they are gone, leaving the pool full of dead
// connections that it hands out without a liveness check.
func terminateAll(t *testing.T, pool *pgxpool.Pool, killer *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	var (
		conns []*pgxpool.Conn
		pids  []int32
	)
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		pids = append(pids, int32(c.Conn().PgConn().PID()))
	}
	for _, c := range conns {
		c.Release()
	}
	var killed int
	err := killer.QueryRow(ctx,
		`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM unnest($1::int[]) AS pid`, pids).Scan(&killed)
	if err != nil || killed != len(pids) {
		t.Fatalf("terminated %d of %d backends: %v", killed, len(pids), err)
	}
}

func TestStatementsSurviveKilledConnections(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	// Without the pool's ping on acquire every dead connection reaches the
	// store, as it does for connections idle less than a second.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	killer := testkit.PoolAt(t, url)
	s := newStore(t, pool)
	ctx := t.Context()
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "k"}

	terminateAll(t, pool, killer)
	if res := claim(t, s, scope, "fp", "owner-1"); !res.Claimed || res.TakeOver {
		t.Fatalf("claim after the pool's connections were killed: %+v", res)
	}
	terminateAll(t, pool, killer)
	if err := s.Renew(ctx, scope, "owner-1", time.Minute); err != nil {
		t.Fatalf("Renew after the pool's connections were killed: %v", err)
	}
	terminateAll(t, pool, killer)
	resp := idempotency.Response{Status: 201, Body: []byte("done")}
	if err := s.Complete(ctx, scope, "owner-1", resp, time.Hour); err != nil {
		t.Fatalf("Complete after the pool's connections were killed: %v", err)
	}
	terminateAll(t, pool, killer)
	rec, err := s.Get(ctx, scope)
	if err != nil || rec.State != idempotency.StateCompleted || string(rec.Response.Body) != "done" {
		t.Fatalf("Get after the pool's connections were killed: %+v, %v", rec, err)
	}
	terminateAll(t, pool, killer)
	if res := claim(t, s, scope, "fp", "owner-2"); res.Claimed || res.Record.State != idempotency.StateCompleted {
		t.Fatalf("replay claim after the pool's connections were killed: %+v", res)
	}
}

// A statement whose answer was lost with its connection runs again; these
// check that the second run recognises the first one's committed write
// instead of reporting a lost claim.
func TestRetryRecognisesOwnWrite(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := newStore(t, pool)
	ctx := t.Context()

	t.Run("claim", func(t *testing.T) {
		scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "claim"}
		first := claim(t, s, scope, "fp", "owner")
		again := claim(t, s, scope, "fp", "owner")
		if !again.Claimed || again.TakeOver || again.Record.FencingToken != first.Record.FencingToken {
			t.Fatalf("second run of a committed claim: %+v, want the same claim", again)
		}
		if res := claim(t, s, scope, "fp", "someone-else"); res.Claimed {
			t.Fatal("another owner claimed a live claim")
		}
	})
	t.Run("complete", func(t *testing.T) {
		scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "complete"}
		claim(t, s, scope, "fp", "owner")
		if err := s.Complete(ctx, scope, "owner", idempotency.Response{Status: 200}, time.Hour); err != nil {
			t.Fatal(err)
		}
		tag, err := pool.Exec(ctx, completeSQL, scope.Tenant, scope.Route, scope.Key, "owner",
			200, nil, nil, false, time.Hour, true, s.channel, scopeID(scope))
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("second run of a committed Complete: %v rows, %v", tag.RowsAffected(), err)
		}
		tag, err = pool.Exec(ctx, completeSQL, scope.Tenant, scope.Route, scope.Key, "intruder",
			200, nil, nil, false, time.Hour, true, s.channel, scopeID(scope))
		if err != nil || tag.RowsAffected() != 0 {
			t.Fatalf("second run by another owner: %v rows, %v", tag.RowsAffected(), err)
		}
	})
	t.Run("release", func(t *testing.T) {
		scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "release"}
		claim(t, s, scope, "fp", "owner")
		if err := s.Release(ctx, scope, "owner"); err != nil {
			t.Fatal(err)
		}
		for _, st := range []idempotency.State{idempotency.StateReleased, idempotency.StateUnknown} {
			tag, err := pool.Exec(ctx, endSQL, scope.Tenant, scope.Route, scope.Key, "owner", string(st), true, s.channel, scopeID(scope), "")
			want := int64(0)
			if st == idempotency.StateReleased {
				want = 1
			}
			if err != nil || tag.RowsAffected() != want {
				t.Fatalf("second run of %s after a committed Release: %d rows (want %d), %v", st, tag.RowsAffected(), want, err)
			}
		}
	})
}

func TestClaimAfterRetentionStartsFresh(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := newStore(t, pool)
	ctx := t.Context()
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "k"}

	first := claim(t, s, scope, "fp-a", "o1").Record.FencingToken
	if err := s.Release(ctx, scope, "o1"); err != nil {
		t.Fatal(err)
	}
	second := claim(t, s, scope, "fp-a", "o2")
	if !second.Claimed || !second.TakeOver || second.Record.FencingToken <= first {
		t.Fatalf("reclaim after release: %+v, want a take-over with a token above %d", second, first)
	}
	if err := s.Complete(ctx, scope, "o2", idempotency.Response{Status: 200}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for _, err := s.Get(ctx, scope); !errors.Is(err, idempotency.ErrNotFound); _, err = s.Get(ctx, scope) {
		if time.Now().After(deadline) {
			t.Fatalf("record not expired within %s: %v", waitFor, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The row is still there (no janitor ran), yet the next claim gets what
	// it would get after the janitor: a new record, whose token is still
	// above the expired one's (the clock floor gives it after the janitor
	// too).
	res := claim(t, s, scope, "fp-b", "o3")
	if !res.Claimed || res.TakeOver || res.Record.FencingToken <= second.Record.FencingToken || res.Record.Fingerprint != "fp-b" || res.Record.Response != nil {
		t.Fatalf("claim after retention: %+v, want a new record with a token above %d", res, second.Record.FencingToken)
	}
	if !res.Record.CreatedAt.After(res.Record.ExpiresAt.Add(-2 * time.Hour)) {
		t.Fatalf("created_at %v kept from the expired record", res.Record.CreatedAt)
	}
}

func receive(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("%s: nothing within %s", what, waitFor)
	}
}

func TestWatchSurvivesListenerTermination(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := newStore(t, pool)
	ctx := t.Context()
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "k"}
	claim(t, s, scope, "fp", "owner")

	changed, stop, err := s.Watch(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	receive(t, changed, "wake-up when the listener connected")
	first := s.pid.Load()
	if first == 0 {
		t.Fatal("listener woke its watchers before it had a connection")
	}

	var ok bool
	if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", int32(first)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate listener backend %d: %v %v", first, ok, err)
	}
	receive(t, changed, "wake-up after the listener reconnected")
	second := s.pid.Load()
	if second == 0 || second == first {
		t.Fatalf("listener backend after reconnect = %d, was %d", second, first)
	}

	select {
	case <-changed:
	default:
	}
	if err := s.Complete(ctx, scope, "owner", idempotency.Response{Status: 200}, time.Hour); err != nil {
		t.Fatal(err)
	}
	receive(t, changed, "notification on the new listener connection")
	if s.pid.Load() != second {
		t.Fatal("the listener reconnected again: the wake-up may not have been the notification")
	}
}

func TestWatchEnds(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := New(pool)
	watching := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.watchers)
	}

	_, stop, err := s.Watch(t.Context(), idempotency.Scope{Tenant: "t", Route: "r", Key: "stopped"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if _, _, err := s.Watch(ctx, idempotency.Scope{Tenant: "t", Route: "r", Key: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	if n := watching(); n != 2 {
		t.Fatalf("%d scopes watched, want 2", n)
	}
	stop()
	stop()
	cancel()
	deadline := time.Now().Add(waitFor)
	for watching() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d scopes still watched after stop and cancel", watching())
		}
		time.Sleep(5 * time.Millisecond)
	}

	s.Close()
	s.Close()
	if _, _, err := s.Watch(t.Context(), idempotency.Scope{Tenant: "t", Route: "r", Key: "late"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}

// Under READ COMMITTED the claim statement's snapshot can predate a
// concurrent writer that its upsert then waits for. These hold such a writer
// open until the claim is blocked on it, then commit: the claim must report
// the row as it is after the commit.
func TestClaimRacesAConcurrentWriter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		before string // committed first
		writer string // held open while the claim starts
	}{
		{
			name: "inserted",
			writer: `INSERT INTO idempotency_records (tenant, route, key, fingerprint, state, owner, fencing_token, lease_until, expires_at)
				VALUES ('t', 'r', 'inserted', 'fp', 'in_flight', 'other', 2, now() + interval '1 hour', now() + interval '1 hour')`,
		},
		{
			name: "updated",
			before: `INSERT INTO idempotency_records (tenant, route, key, fingerprint, state, owner, fencing_token, expires_at)
				VALUES ('t', 'r', 'updated', 'fp', 'released', 'gone', 1, now() + interval '1 hour')`,
			writer: `UPDATE idempotency_records SET state = 'in_flight', owner = 'other', fencing_token = 2, lease_until = now() + interval '1 hour'
				WHERE key = 'updated'`,
		},
	}
	pool := testkit.Pool(t)
	s := newStore(t, pool)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.before != "" {
				if _, err := pool.Exec(ctx, tc.before); err != nil {
					t.Fatal(err)
				}
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			var writer int32
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&writer); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, tc.writer); err != nil {
				t.Fatal(err)
			}

			var (
				wg   sync.WaitGroup
				res  idempotency.ClaimResult
				cerr error
			)
			wg.Go(func() {
				res, cerr = s.Claim(ctx, idempotency.ClaimRequest{
					Scope:       idempotency.Scope{Tenant: "t", Route: "r", Key: tc.name},
					Fingerprint: "fp", Owner: "me", Lease: time.Minute, Retention: time.Hour,
				})
			})
			deadline := time.Now().Add(waitFor)
			for {
				var blocked bool
				err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))", writer).Scan(&blocked)
				if err != nil {
					t.Fatal(err)
				}
				if blocked {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the claim did not wait for the open writer within %s", waitFor)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if cerr != nil {
				t.Fatalf("Claim: %v", cerr)
			}
			if res.Claimed || res.Record.State != idempotency.StateInFlight || res.Record.Owner != "other" || res.Record.FencingToken != 2 {
				t.Fatalf("claim racing a committed writer: %+v, want the writer's live claim", res)
			}
		})
	}
}

// TestNotifiesOnlyWatchedRecords: ending a record nobody waits for sends
// no NOTIFY (a NOTIFY serialises commits database-wide); ending one a
// duplicate watches does, also when the watcher is another Store, as on
// another gateway instance.
func TestNotifiesOnlyWatchedRecords(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := t.Context()
	channel := "idemgate_test_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s := New(pool, WithChannel(channel), WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	t.Cleanup(s.Close)
	other := New(pool, WithChannel(channel), WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	t.Cleanup(other.Close)

	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := pc.Hijack()
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	// next returns the payload of the next notification, or "" when none
	// comes within d.
	next := func(d time.Duration) string {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			return ""
		}
		return n.Payload
	}

	idempotencytest.EndEach(t, s, other, func(sc idempotency.Scope, owner string) { claim(t, s, sc, "fp", owner) },
		func(name string, watched idempotency.Scope, _ <-chan struct{}, stop func()) {
			stop()
			// Notifications arrive in commit order: the first one must be the
			// watched record's, so the quiet one sent none.
			if got, want := next(waitFor), scopeID(watched); got != want {
				t.Fatalf("%s: first notification %q, want the watched record's %q (the unwatched one must send none)", name, got, want)
			}
		})
	if got := next(200 * time.Millisecond); got != "" {
		t.Fatalf("an unexpected notification: %q", got)
	}
}
