package migrations_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
)

// TestKeysNotLedByTenant reads the migrated schema and lists every table
// without a tenant column, and every primary key and unique index whose
// first column is not tenant. A table keyed by tenant first can be
// distributed by tenant (Citus: the distribution column must be part of
// every primary key and unique constraint) or split over databases by a
// tenant→shard map; each entry here is a reason it cannot yet. A new
// table or key not led by tenant fails the test until it is made
// tenant-led or added to the allow-list with the reason.
func TestKeysNotLedByTenant(t *testing.T) {
	db := open(t, testkit.Postgres(t))
	rows, err := db.QueryContext(t.Context(), `
SELECT 'table ' || c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname <> 'goose_db_version'
   AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                    WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped)
UNION ALL
SELECT CASE WHEN x.indisprimary THEN 'primary key ' ELSE 'unique ' END || t.relname || ' (' ||
       (SELECT string_agg(COALESCE(a.attname, 'expression'), ', ' ORDER BY k.ord)
          FROM unnest(x.indkey) WITH ORDINALITY k(attnum, ord)
          LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum) || ')'
  FROM pg_index x
  JOIN pg_class t ON t.oid = x.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
  LEFT JOIN pg_attribute first ON first.attrelid = t.oid AND first.attnum = x.indkey[0]
 WHERE n.nspname = current_schema() AND x.indisunique AND t.relname <> 'goose_db_version'
   AND first.attname IS DISTINCT FROM 'tenant'
ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		found = append(found, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range found {
		if _, ok := notTenantLed[s]; !ok {
			t.Errorf("%s is not led by tenant: lead it with tenant, or add it to notTenantLed with the reason", s)
		}
	}
	for s := range notTenantLed {
		if !slices.Contains(found, s) {
			t.Errorf("%s is in notTenantLed but the schema no longer has it so: take it out", s)
		}
	}
	if t.Failed() {
		fmt.Println("not led by tenant:")
		for _, s := range found {
			fmt.Printf("\t%q: \"\",\n", s)
		}
	}
}

// notTenantLed is every table, primary key and unique index of the schema
// that is not led by the tenant column, with the reason (docs/operations/
// scaling-out.md lists them for operators).
var notTenantLed = map[string]string{
	// jobs: the worker finds a job by its id alone (SetStatus, Follow, the
	// relay, the final callbacks), from a task that names the job but
	// is not looked up by tenant; the id derives from (tenant, route,
	// key), and UNIQUE (tenant, route, idempotency_key) is tenant-led.
	// Leading the key with tenant needs every lookup by id to carry the
	// tenant first.
	"primary key jobs (id)": "the worker's updates by job id alone",
	// Fences: the resource is "<tenant>/<resource>" (migration 00006), so
	// a key's prefix names its tenant and a tenant→shard map can route it,
	// but there is no tenant column to distribute by. The tokens are
	// taken by INSERT … ON CONFLICT (resource) on every attempt (hot
	// path); tasks without a tenant keep unscoped resources.
	"table fencing_tokens":                  "the tenant is the prefix of resource, not a column",
	"primary key fencing_tokens (resource)": "ON CONFLICT (resource) on every attempt",
	"table fence_accepted":                  "the tenant is the prefix of resource, not a column",
	"primary key fence_accepted (resource)": "ON CONFLICT (resource) on every guarded write",
	// Final callbacks hang off their job by job_id; they carry no tenant
	// column and are read and deleted by job id.
	"table job_callbacks":                     "rows of a job, found by job_id",
	"primary key job_callbacks (job_id, seq)": "rows of a job, found by job_id",
	"table job_callback_attempts":             "rows of a job's callback, found by job_id",
	"primary key job_callback_attempts (id)":  "rows of a job's callback, found by job_id",
	// The console's activity charts count every tenant's jobs together,
	// one row per bucket of time (migration 00028).
	"table job_activity":                        "one row per bucket of time for all tenants",
	"primary key job_activity (at, width_secs)": "one row per bucket of time for all tenants",
}
