package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for the migrations

	"github.com/idemgate/idemgate/internal/e2e/chaos"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/migrations"
)

// TestAmbiguousCommitIsSettled runs a private PostgreSQL whose every
// commit waits for a synchronous standby that does not exist
// (synchronous_standby_names = 'nonexistent'), as a commit waits for a
// standby that fell behind. A claim and a completion whose deadline
// passes during that wait have committed locally; the store must settle
// them from what the row says (claimed, completed) instead of reporting a
// failure that would make the gateway answer 503 and a retry find the key
// held by a claim nobody runs. A duplicate meanwhile must not run.
func TestAmbiguousCommitIsSettled(t *testing.T) {
	testkit.PostgresURL(t) // runs where the integration tests run
	ctx := t.Context()
	dir := t.TempDir()
	// As root, the server runs as the postgres user, which must reach dir.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pg, err := chaos.StartPostgres(ctx, filepath.Join(dir, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.CreateDatabase(ctx, "idemgate"); err != nil {
		t.Fatal(err)
	}
	dbURL := chaos.URL(pg.Addr(), "idemgate")
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	syncStandby(t, pool, "nonexistent")

	for _, tc := range []struct {
		name string
		opts []pgstore.Option
	}{
		{"batched", nil},
		{"unbatched", []pgstore.Option{pgstore.WithBatching(0, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := pgstore.New(pool, append(tc.opts, pgstore.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))...)
			t.Cleanup(s.Close)
			scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "sync-" + tc.name}
			req := idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "first", Lease: time.Minute, Retention: time.Hour}

			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			res, err := s.Claim(short, req)
			cancel()
			if err != nil || !res.Claimed || res.TakeOver || res.Record.Owner != "first" || res.Record.FencingToken <= 0 {
				t.Fatalf("claim whose commit waited past its deadline: %+v %v, want it settled as claimed", res, err)
			}
			// A duplicate finds the claim: no second run. (A claim that only
			// reads commits nothing, so it does not wait for the standby.)
			dup, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "second", Lease: time.Minute, Retention: time.Hour})
			if err != nil || dup.Claimed || dup.Record.State != idempotency.StateInFlight || dup.Record.Owner != "first" {
				t.Fatalf("duplicate during the claim: %+v %v, want the first claim in flight", dup, err)
			}

			short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			err = s.Complete(short, scope, "first", idempotency.Response{Status: 201, Body: []byte("done")}, time.Hour)
			cancel()
			if err != nil {
				t.Fatalf("completion whose commit waited past its deadline: %v, want it settled as stored", err)
			}
			rec, err := s.Get(ctx, scope)
			if err != nil || rec.State != idempotency.StateCompleted || rec.Response == nil || string(rec.Response.Body) != "done" {
				t.Fatalf("record after the completion: %+v %v, want completed with the response", rec, err)
			}
			// A completion by an owner that no longer holds the claim is
			// refused, whatever its commit waits for.
			short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			err = s.Complete(short, scope, "second", idempotency.Response{Status: 500}, time.Hour)
			cancel()
			if !errors.Is(err, idempotency.ErrNotOwner) {
				t.Fatalf("completion by another owner: %v, want ErrNotOwner", err)
			}
		})
	}

	// With the standby's wait off again, a commit is answered as usual.
	syncStandby(t, pool, "")
	s := pgstore.New(pool)
	t.Cleanup(s.Close)
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := s.Claim(short, idempotency.ClaimRequest{Scope: idempotency.Scope{Tenant: "acme", Route: "payments", Key: "after"},
		Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("claim once the standby's wait is off: %+v %v", res, err)
	}
}

// syncStandby sets synchronous_standby_names and waits until every
// connection of pool has it.
func syncStandby(t *testing.T, pool *pgxpool.Pool, names string) {
	t.Helper()
	ctx := t.Context()
	q := `ALTER SYSTEM SET synchronous_standby_names = '` + names + `'`
	if names == "" {
		q = `ALTER SYSTEM RESET synchronous_standby_names`
	}
	if _, err := pool.Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conns := pool.AcquireAllIdle(ctx)
		ok := true
		for _, c := range conns {
			var got string
			if err := c.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&got); err != nil || got != names {
				ok = false
			}
			c.Release()
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("synchronous_standby_names not %q within 30s", names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
