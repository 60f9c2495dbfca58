package examples

import (
	"database/sql"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/idemgate/idemgate/internal/testkit"
)

// tenantMigration is the migration that gives the example tables their
// tenant (examples/migrations).
const tenantMigration = 2

// sqlFiles keeps the SQL migrations of a folder.
type sqlFiles struct{ fs.FS }

func (f sqlFiles) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(f.FS, name)
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return path.Ext(e.Name()) != ".sql" }), err
}

// beforeTenants returns a schema with idemgate's migrations and the
// examples' up to just before the tenant migration, and the provider of
// the examples' migrations that moves it.
func beforeTenants(t *testing.T) (*sql.DB, *goose.Provider) {
	t.Helper()
	db, err := sql.Open("pgx", testkit.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, sqlFiles{os.DirFS("migrations")}, goose.WithTableName(MigrationTable))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), tenantMigration-1); err != nil {
		t.Fatal(err)
	}
	return db, p
}

func exec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// column returns a text column, sorted in Go: the database's collation
// may order spaces and case otherwise.
func column(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// plantBeforeTenants writes what the examples wrote before they had
// tenants: acme's invoice of order o-1 (globex submitted the order later),
// globex's payment, a notification no job names, and SKU S that acme and
// then globex adjusted.
func plantBeforeTenants(t *testing.T, db *sql.DB, globexDelta int64) {
	t.Helper()
	exec(t, db, `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, created_at) VALUES
 ('j1', 'acme',   'r', 'k1', 'invoice.create',   'default', 'invoice:o-1',   '{}', now() - interval '5 min'),
 ('j2', 'globex', 'r', 'k2', 'invoice.create',   'default', 'invoice:o-1',   '{}', now() - interval '4 min'),
 ('j3', 'globex', 'r', 'k3', 'payment.charge',   'default', 'payment:p-1',   '{}', now() - interval '4 min'),
 ('j4', 'acme',   'r', 'k4', 'inventory.adjust', 'default', 'inventory:a-1', '{}', now() - interval '3 min'),
 ('j5', 'globex', 'r', 'k5', 'inventory.adjust', 'default', 'inventory:a-2', '{}', now() - interval '2 min')`)
	exec(t, db, `INSERT INTO invoices (id, order_id, amount_cents, currency, job_key, fencing_token) VALUES ('inv_1', 'o-1', 100, 'EUR', 'invoice:o-1', 1)`)
	exec(t, db, `INSERT INTO payments (payment_id, amount_cents, currency, status, partner_charge_id, job_key, fencing_token)
	             VALUES ('p-1', 100, 'EUR', 'succeeded', 'ch_1', 'payment:p-1', 1)`)
	exec(t, db, `INSERT INTO notifications (dedup_key, event_id, user_id, template, partner_message_id, job_key, fencing_token)
	             VALUES ('email:w:u:e', 'e', 'u', 'w', 'msg_1', 'email:w:u:e', 1)`)
	exec(t, db, `INSERT INTO inventory_items (sku, initial_stock, stock, fencing_token) VALUES ('S', 10, $1, 2), ('U', 7, 7, 0)`, 15+globexDelta)
	exec(t, db, `INSERT INTO inventory_ledger (adjustment_id, sku, delta, job_key, fencing_token, created_at) VALUES
	              ('a-1', 'S', 5, 'inventory:a-1', 1, now() - interval '3 min'),
	              ('a-2', 'S', $1, 'inventory:a-2', 2, now() - interval '2 min')`, globexDelta)
}

func TestTenantMigration(t *testing.T) {
	t.Parallel()
	db, p := beforeTenants(t)
	plantBeforeTenants(t, db, 3)
	if _, err := p.UpTo(t.Context(), tenantMigration); err != nil {
		t.Fatal(err)
	}
	got := column(t, db, `
SELECT 'invoice ' || tenant || ' ' || order_id FROM invoices
UNION ALL SELECT 'payment ' || tenant || ' ' || payment_id FROM payments
UNION ALL SELECT 'notification ' || tenant || ' ' || dedup_key FROM notifications
UNION ALL SELECT 'ledger ' || tenant || ' ' || adjustment_id FROM inventory_ledger
UNION ALL SELECT format('item %s %s %s+%s', tenant, sku, initial_stock, stock - initial_stock) FROM inventory_items`)
	want := []string{
		"invoice acme o-1",  // the earliest job's tenant
		"item  U 7+0",       // no adjustment names a tenant
		"item acme S 10+5",  // its first adjustment's tenant, with its ledger
		"item globex S 0+3", // split off: globex's adjustment is its stock
		"ledger acme a-1",
		"ledger globex a-2",
		"notification  email:w:u:e", // no job: the empty tenant
		"payment globex p-1",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after the migration:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Keys are a tenant's now.
	exec(t, db, `INSERT INTO invoices (tenant, order_id, amount_cents, currency, job_key, fencing_token) VALUES ('globex', 'o-1', 100, 'EUR', 'invoice:o-1', 1)`)
	if _, err := db.ExecContext(t.Context(), `INSERT INTO invoices (tenant, order_id, amount_cents, currency, job_key, fencing_token) VALUES ('acme', 'o-1', 100, 'EUR', 'invoice:o-1', 1)`); err == nil {
		t.Fatal("a second invoice of acme's order o-1 was accepted")
	}
	if _, err := db.ExecContext(t.Context(), `INSERT INTO inventory_ledger (tenant, adjustment_id, sku, delta, job_key, fencing_token) VALUES ('globex', 'a-9', 'U', 1, 'inventory:a-9', 1)`); err == nil {
		t.Fatal("a ledger row for a SKU globex does not have was accepted")
	}
	exec(t, db, `DELETE FROM invoices WHERE tenant = 'globex'`)

	if _, err := p.DownTo(t.Context(), tenantMigration-1); err != nil {
		t.Fatal(err)
	}
	got = column(t, db, `
SELECT format('item %s %s+%s', sku, initial_stock, stock - initial_stock) FROM inventory_items
UNION ALL SELECT 'counter ' || resource || ' ' || token FROM fencing_tokens`)
	want = []string{"counter sku:S 2", "item S 10+8", "item U 7+0"}
	if !slices.Equal(got, want) {
		t.Fatalf("after the migration's Down:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A SKU whose stock one tenant took from another's cannot be divided:
// the migration stops, names it, and changes nothing.
func TestTenantMigrationStopsOnASharedStock(t *testing.T) {
	t.Parallel()
	db, p := beforeTenants(t)
	plantBeforeTenants(t, db, -3)
	_, err := p.UpTo(t.Context(), tenantMigration)
	if err == nil || !strings.Contains(err.Error(), "SKUs S were adjusted by several tenants") {
		t.Fatalf("migration: %v, want it to stop naming SKU S", err)
	}
	if got := column(t, db, `SELECT sku || ' ' || stock FROM inventory_items`); !slices.Equal(got, []string{"S 12", "U 7"}) {
		t.Fatalf("items after the failed migration = %q, want them unchanged", got)
	}
}
