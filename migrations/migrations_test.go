package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/migrations"
)

func open(t *testing.T, dbURL string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// applied is how many times each migration version is recorded as
// applied in the schema of db.
func applied(t *testing.T, db *sql.DB) map[int64]int {
	t.Helper()
	var exists bool
	if err := db.QueryRowContext(t.Context(), `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return nil
	}
	rows, err := db.QueryContext(t.Context(), `SELECT version_id FROM goose_db_version WHERE version_id > 0 AND is_applied`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := map[int64]int{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		n[v]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func migrationCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	p, err := migrations.Provider(db)
	if err != nil {
		t.Fatal(err)
	}
	return len(p.ListSources())
}

// Two deploys that migrate the same schema at once: every `migrate up`
// succeeds and each migration is applied once (without the lock, the
// losers fail on a table or row the winner already made).
func TestConcurrentUpAppliesEachMigrationOnce(t *testing.T) {
	t.Parallel()
	dbURL := testkit.EmptySchema(t)
	const migrators = 4
	var wg sync.WaitGroup
	errs := make([]error, migrators)
	for i := range migrators {
		db := open(t, dbURL) // a pool each, as separate processes would have
		wg.Go(func() { errs[i] = migrations.Up(t.Context(), db) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	db := open(t, dbURL)
	got, want := applied(t, db), migrationCount(t, db)
	if len(got) != want {
		t.Errorf("%d versions applied, want %d: %v", len(got), want, got)
	}
	for v, n := range got {
		if n != 1 {
			t.Errorf("version %d applied %d times", v, n)
		}
	}
}

// The lock is the schema's own: a migration held up on one schema holds up
// nobody migrating another (each test's schema, the bench schema), and
// goes ahead once the other holder lets go.
func TestLockIsTheSchemasOwn(t *testing.T) {
	t.Parallel()
	held, free := testkit.EmptySchema(t), testkit.EmptySchema(t)
	heldDB := open(t, held)
	var schema string
	if err := heldDB.QueryRowContext(t.Context(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	conn, err := heldDB.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "SELECT pg_advisory_lock($1)", migrations.LockID(schema)); err != nil {
		t.Fatal(err)
	}

	if err := migrations.Up(t.Context(), open(t, free)); err != nil {
		t.Fatalf("another schema's migration waited for the lock: %v", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := migrations.Up(ctx, open(t, held)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("migrating while another holds the schema's lock: %v, want it to wait until the deadline", err)
	}
	if got := applied(t, heldDB); len(got) != 0 {
		t.Fatalf("applied while the lock was held: %v", got)
	}

	if _, err := conn.ExecContext(t.Context(), "SELECT pg_advisory_unlock($1)", migrations.LockID(schema)); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(t.Context(), open(t, held)); err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}
	if got, want := applied(t, heldDB), migrationCount(t, heldDB); len(got) != want {
		t.Fatalf("%d versions applied, want %d", len(got), want)
	}
}
