package idemgate_test

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/examples/demo"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/internal/testkit"
)

// command runs one idemgate command line with opts, as a binary built
// with them would, and returns its exit code and output.
func command(t *testing.T, env map[string]string, args []string, opts ...extension.Option) (int, string) {
	t.Helper()
	var out bytes.Buffer
	err := idemgate.Run(context.Background(), args, func(k string) string { return env[k] }, &out, &out, opts...)
	return idemgate.ExitCode(err, &out), out.String()
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A configuration written for the example jobs — a route naming
// invoice.create without declaring it — is the examples' binary's: the
// product binary has no such task and says so.
func TestTheExampleTasksAreTheExamplesBinarys(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `admin_listen: ""
store: memory
auth: {mode: none}
redis_url: redis://127.0.0.1:6379/0
database_url: postgres://127.0.0.1/x
routes:
  - {name: invoices, methods: [POST], path: /v1/invoices, enqueue: {task: invoice.create}}
`)
	code, out := command(t, nil, []string{"config", "check", "--config", cfg})
	if code != 2 || !strings.Contains(out, "invoice.create") {
		t.Errorf("idemgate config check: exit %d\n%s\nwant 2, naming the undeclared task", code, out)
	}
	code, out = command(t, nil, []string{"config", "check", "--config", cfg}, demo.Options()...)
	if code != 0 {
		t.Errorf("idemgate-examples config check: exit %d\n%s\nwant 0: the examples declare invoice.create", code, out)
	}
}

// worker.partner_url is the examples' setting: idemgate-examples reads
// and checks it, idemgate refuses it and says whose it is.
func TestPartnerURLIsTheExamplesSetting(t *testing.T) {
	t.Parallel()
	cfg := func(url string) string {
		return writeConfig(t, `admin_listen: ""
store: memory
auth: {mode: none}
worker: {partner_url: "`+url+`"}
routes:
  - {name: up, methods: [POST], path: /up, upstream: "http://127.0.0.1:1"}
`)
	}
	code, out := command(t, nil, []string{"config", "check", "--config", cfg("http://partner:9100")})
	if code != 2 || !strings.Contains(out, "worker.partner_url: the example jobs' setting") || !strings.Contains(out, "idemgate-examples") {
		t.Errorf("idemgate config check: exit %d\n%s\nwant 2, naming idemgate-examples", code, out)
	}
	code, out = command(t, nil, []string{"config", "check", "--config", cfg("http://partner:9100")}, demo.Options()...)
	if code != 0 {
		t.Errorf("idemgate-examples config check: exit %d\n%s", code, out)
	}
	code, out = command(t, nil, []string{"config", "check", "--config", cfg("partner:9100")}, demo.Options()...)
	if code != 2 || !strings.Contains(out, `worker.partner_url: "partner:9100" is not an http:// or https:// URL with a host`) {
		t.Errorf("idemgate-examples config check of a bad URL: exit %d\n%s", code, out)
	}
}

// `migrate up` of the product creates none of the example tables; the
// examples' binary creates them in a version table of their own; and the
// product's migrate up and down afterwards leave them alone.
func TestMigrationsOfTheExamplesAreTheirOwn(t *testing.T) {
	t.Parallel()
	dbURL := testkit.EmptySchema(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	exists := func(table string) bool {
		t.Helper()
		var ok bool
		if err := db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if code, out := command(t, env, []string{"migrate", "up"}); code != 0 {
		t.Fatalf("idemgate migrate up: exit %d\n%s", code, out)
	}
	for _, table := range []string{"invoices", "inventory_items", "inventory_ledger", "payments", "notifications"} {
		if exists(table) {
			t.Errorf("idemgate migrate up created %s, an example table", table)
		}
	}
	if !exists("jobs") || !exists("idempotency_records") {
		t.Fatal("idemgate migrate up did not create its own tables")
	}

	code, out := command(t, env, []string{"migrate", "up"}, demo.Options()...)
	if code != 0 || !strings.Contains(out, "examples (version table idemgate_examples_version):") {
		t.Fatalf("idemgate-examples migrate up: exit %d\n%s", code, out)
	}
	if !exists("invoices") || !exists("idemgate_examples_version") {
		t.Fatal("idemgate-examples migrate up did not create the example tables in their own version table")
	}
	if _, err := db.Exec(`INSERT INTO invoices (tenant, order_id, amount_cents, currency, job_key, fencing_token) VALUES ('acme', 'o-1', 100, 'EUR', 'invoice:o-1', 1)`); err != nil {
		t.Fatal(err)
	}

	// The product again, up then down: the examples' rows stay.
	if code, out := command(t, env, []string{"migrate", "up"}); code != 0 {
		t.Fatalf("idemgate migrate up again: exit %d\n%s", code, out)
	}
	if code, out := command(t, env, []string{"migrate", "down"}); code != 0 || !strings.Contains(out, "rolled back the latest migration") {
		t.Fatalf("idemgate migrate down: exit %d\n%s", code, out)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM invoices`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("invoices after the product's migrations: %d rows, %v; want the one written", n, err)
	}

	// The examples' migrations roll back before idemgate's.
	code, out = command(t, env, []string{"migrate", "down"}, demo.Options()...)
	if code != 0 || !strings.Contains(out, "rolled back the latest migration of examples") {
		t.Fatalf("idemgate-examples migrate down: exit %d\n%s", code, out)
	}
}

// idemgate's own reconcile check, with no program's: a job unfinished and
// unchanged for longer than --stuck-after is a violation (exit 1), named
// with where the queue holds its task.
func TestReconcileReportsStuckJobs(t *testing.T) {
	t.Parallel()
	dbURL := testkit.Postgres(t)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	cfg := writeConfig(t, `admin_listen: ""
store: memory
auth: {mode: none}
database_url: `+dbURL+`
routes:
  - {name: up, methods: [POST], path: /up, upstream: "http://127.0.0.1:1"}
`)
	code, out := command(t, nil, []string{"reconcile", "--config", cfg})
	if code != 0 || !strings.Contains(out, "reconcile: clean") {
		t.Fatalf("reconcile of an empty database: exit %d\n%s", code, out)
	}
	if _, err := db.Exec(`INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, updated_at)
VALUES ('job_old', 'acme', 'r', 'k', 'report.build', 'default', 'report:1', '{}', now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	code, out = command(t, nil, []string{"reconcile", "--config", cfg, "--stuck-after", "1h"})
	if code != 1 || !strings.Contains(out, "violation [stuck_jobs] job_old acme/report:1: report.build job job_old is queued, unchanged for 2h") ||
		!strings.Contains(out, "its task was not looked up") {
		t.Errorf("reconcile with a stuck job: exit %d\n%s\nwant 1 and the job named", code, out)
	}
	code, out = command(t, nil, []string{"reconcile", "--config", cfg, "--stuck-after", "3h"})
	if code != 0 {
		t.Errorf("reconcile with --stuck-after beyond the job's age: exit %d\n%s", code, out)
	}
}
