package execution_test

import (
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver for goose
	"github.com/pressly/goose/v3"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/migrations"
	"github.com/idemgate/idemgate/workers/execution"
)

// migratedSchema returns the URL of a schema of the test's own with every
// migration applied, a database/sql handle on it (closed when the test
// ends) and the provider that moves it down and up again.
func migratedSchema(t *testing.T) (string, *sql.DB, *goose.Provider) {
	t.Helper()
	dbURL := testkit.Postgres(t)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	p, err := migrations.Provider(db)
	if err != nil {
		t.Fatal(err)
	}
	return dbURL, db, p
}

// TestTenantScopeMigration: rows written before business keys had a
// tenant (migration 00006) keep working after it. An execution takes the
// tenant of its job, and a tenant's fencing counter continues above every
// token its business rows already hold, or its next write would be
// refused as stale.
func TestTenantScopeMigration(t *testing.T) {
	dbURL, db, p := migratedSchema(t)
	ctx := t.Context()
	if _, err := p.DownTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload)
		 VALUES ('job_a', 'acme', 'invoices', 'k1', 'invoice.create', 'default', 'invoice:o-1', '{}'),
		        ('job_b', 'globex', 'invoices', 'k2', 'invoice.create', 'default', 'invoice:o-2', '{}')`,
		`INSERT INTO job_executions (key, task, resource, status, attempt_count, fencing_token)
		 VALUES ('invoice:o-1', 'invoice.create', 'order:o-1', 'succeeded', 1, 7),
		        ('invoice:o-9', 'invoice.create', 'order:o-9', 'processing', 1, 2)`,
		`INSERT INTO fencing_tokens (resource, token) VALUES ('order:o-1', 7), ('order:o-9', 2)`,
		`INSERT INTO fence_accepted (resource, token) VALUES ('order:o-1', 7)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}

	store := execution.New(testkit.PoolAt(t, dbURL))
	rec, err := store.Get(ctx, "acme", "invoice:o-1")
	if err != nil || rec.Status != job.StatusSucceeded || rec.FencingToken != 7 {
		t.Fatalf("acme's execution after the migration: %+v %v, want its succeeded row", rec, err)
	}
	if _, err := store.Get(ctx, "", "invoice:o-9"); err != nil {
		t.Fatalf("an execution no job names keeps the empty tenant: %v", err)
	}
	// Each tenant's scoped counter continues above the old one.
	for _, tenant := range []string{"acme", "globex"} {
		next, err := store.Take(ctx, execution.Attempt{Tenant: tenant, Key: "invoice:o-1-again", Task: "invoice.create", Resource: tenant + "/order:o-1"})
		if err != nil || next.FencingToken <= 7 {
			t.Fatalf("%s's first token on order:o-1 after the migration: %+v %v, want above 7", tenant, next, err)
		}
	}
	var accepted int64
	if err := db.QueryRowContext(ctx, `SELECT token FROM fence_accepted WHERE resource = 'acme/order:o-1'`).Scan(&accepted); err != nil || accepted != 7 {
		t.Fatalf("acme's accepted fence: %d %v, want 7 carried over", accepted, err)
	}
}

// TestUnavailableAttemptsMigration: from migration 00009 a job may have 0
// attempts (every one so far found a dependency unavailable); rolling it
// back counts such a job as having had one.
func TestUnavailableAttemptsMigration(t *testing.T) {
	_, db, p := migratedSchema(t)
	ctx := t.Context()
	const insert = `INSERT INTO job_executions (tenant, key, task, resource, status, attempt_count, fencing_token)
		VALUES ('acme', $1, 'payment.charge', 'acme/payment:1', 'processing', 0, 1)`
	if _, err := db.ExecContext(ctx, insert, "payment:1"); err != nil {
		t.Fatalf("a job with 0 attempts: %v", err)
	}
	if _, err := p.DownTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	var attempts int
	if err := db.QueryRowContext(ctx, `SELECT attempt_count FROM job_executions WHERE key = 'payment:1'`).Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("attempts after rolling 00009 back: %d %v, want 1", attempts, err)
	}
	if _, err := db.ExecContext(ctx, insert, "payment:2"); err == nil {
		t.Fatal("before 00009, a job with 0 attempts was accepted")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, insert, "payment:2"); err != nil {
		t.Fatalf("a job with 0 attempts after 00009 again: %v", err)
	}
}
