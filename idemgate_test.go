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
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers"
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

// reports is a program's extension of its own: the job report.build
// (testdata/jobs.yaml), a Go handler for it that does nothing, and its
// table, reports (testdata/migrations).
func reports(t *testing.T) []extension.Option {
	t.Helper()
	jobs, err := os.ReadFile("testdata/jobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return []extension.Option{
		extension.WithJobs(jobs),
		extension.WithHandlers([]string{"report.build"}, func(*workers.Handlers, extension.Worker) error { return nil }),
		extension.WithMigrations(extension.Migrations{Name: "reports", Table: "idemgate_reports_version", FS: os.DirFS("testdata/migrations")}),
	}
}

// A route naming a task that no job declares is refused by the product
// binary. A program whose extension declares the task accepts it.
func TestAnExtensionDeclaresItsTasks(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `admin_listen: ""
store: memory
auth: {mode: none}
redis_url: redis://127.0.0.1:6379/0
database_url: postgres://127.0.0.1/x
routes:
  - {name: reports, methods: [POST], path: /v1/reports, enqueue: {task: report.build}}
`)
	code, out := command(t, nil, []string{"config", "check", "--config", cfg})
	if code != 2 || !strings.Contains(out, "report.build") {
		t.Errorf("idemgate config check: exit %d\n%s\nwant 2, naming the undeclared task", code, out)
	}
	code, out = command(t, nil, []string{"config", "check", "--config", cfg}, reports(t)...)
	if code != 0 {
		t.Errorf("config check with the extension: exit %d\n%s\nwant 0: the extension declares report.build", code, out)
	}
}

// worker.partner_url is the examples' setting. idemgate refuses it and
// says whose it is. The examples' tests check that idemgate-examples
// reads it.
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
}

// `migrate up` of the product creates none of an extension's tables. A
// program with the extension creates them in a version table of their
// own. The product's migrate up and down afterwards leave them alone.
func TestMigrationsOfAnExtensionAreTheirOwn(t *testing.T) {
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
	if exists("reports") {
		t.Error("idemgate migrate up created reports, the extension's table")
	}
	if !exists("jobs") || !exists("idempotency_records") {
		t.Fatal("idemgate migrate up did not create its own tables")
	}

	code, out := command(t, env, []string{"migrate", "up"}, reports(t)...)
	if code != 0 || !strings.Contains(out, "reports (version table idemgate_reports_version):") {
		t.Fatalf("migrate up with the extension: exit %d\n%s", code, out)
	}
	if !exists("reports") || !exists("idemgate_reports_version") {
		t.Fatal("migrate up with the extension did not create reports in its own version table")
	}
	if _, err := db.Exec(`INSERT INTO reports (tenant, report_id) VALUES ('acme', 'r-1')`); err != nil {
		t.Fatal(err)
	}

	// The product again, up then down: the extension's rows stay.
	if code, out := command(t, env, []string{"migrate", "up"}); code != 0 {
		t.Fatalf("idemgate migrate up again: exit %d\n%s", code, out)
	}
	if code, out := command(t, env, []string{"migrate", "down"}); code != 0 || !strings.Contains(out, "rolled back the latest migration") {
		t.Fatalf("idemgate migrate down: exit %d\n%s", code, out)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM reports`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("reports after the product's migrations: %d rows, %v; want the one written", n, err)
	}

	// The extension's migrations roll back before idemgate's.
	code, out = command(t, env, []string{"migrate", "down"}, reports(t)...)
	if code != 0 || !strings.Contains(out, "rolled back the latest migration of reports") {
		t.Fatalf("migrate down with the extension: exit %d\n%s", code, out)
	}
	if exists("reports") {
		t.Error("migrate down with the extension left reports")
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
