package job_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// BenchmarkList pages through a jobs table of BENCH_LIST_JOBS rows (for
// example 3000000), seeded into a schema of its own that is dropped at the
// end; without the variable it is skipped. A third of the rows belong to
// tenant acme, the rest to 97 others; 90% succeeded, 5% failed, 3%
// queued, 1% scheduled (half of them due), 1% processing; five tasks;
// one job every 100 ms. Each sub-benchmark is one page of 50:
//
//	BENCH_LIST_JOBS=3000000 TEST_DATABASE_URL=… go test -run '^$' -bench BenchmarkList -benchtime 200x ./job/
func BenchmarkList(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("BENCH_LIST_JOBS"))
	if n <= 0 {
		b.Skip("BENCH_LIST_JOBS is not set: set it to the number of jobs to seed, e.g. 3000000")
	}
	pool := testkit.Pool(b)
	ctx := context.Background()
	start := time.Now()
	if _, err := pool.Exec(ctx, `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload,
                  status, attempts, created_at, updated_at, not_before, finished_at)
SELECT 'job_' || lpad(to_hex(i), 32, '0'),
       CASE WHEN i % 3 = 0 THEN 'acme' ELSE 't' || (i % 97) END,
       'r', 'k' || i, 'task.' || (i % 5), 'default', 'b' || i,
       jsonb_build_object('order_id', 'o-' || i),
       CASE WHEN i % 100 < 90 THEN 'succeeded' WHEN i % 100 < 95 THEN 'failed'
            WHEN i % 100 < 98 THEN 'queued' WHEN i % 100 = 98 THEN 'scheduled' ELSE 'processing' END,
       1, t, t,
       CASE WHEN i % 100 = 98 THEN t + CASE WHEN i % 200 = 98 THEN interval '10 years' ELSE interval '1 second' END END,
       CASE WHEN i % 100 < 95 THEN t END
  FROM generate_series(1, $1::int) i, LATERAL (SELECT now() - ($1::int - i) * interval '100 ms' AS t) c`, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d jobs in %s", n, time.Since(start).Round(time.Second))
	records := job.NewStore(pool)
	// deep is the cursor of acme's job 90% of the way down its list.
	var deepAt time.Time
	var deepID string
	if err := pool.QueryRow(ctx, `SELECT created_at, id FROM jobs WHERE tenant = 'acme'
 ORDER BY created_at DESC, id DESC OFFSET $1 LIMIT 1`, n/3*9/10).Scan(&deepAt, &deepID); err != nil {
		b.Fatal(err)
	}
	deep := job.CursorAt(deepAt, deepID)
	day := time.Now().Add(-24 * time.Hour)
	for _, bc := range []struct {
		name string
		f    job.ListFilter
	}{
		{"tenant/first", job.ListFilter{Tenant: "acme"}},
		{"tenant/deep", job.ListFilter{Tenant: "acme", After: deep}},
		{"tenant/status=failed", job.ListFilter{Tenant: "acme", Status: job.StatusFailed}},
		{"tenant/status=failed/deep", job.ListFilter{Tenant: "acme", Status: job.StatusFailed, After: deep}},
		{"tenant/status=queued", job.ListFilter{Tenant: "acme", Status: job.StatusQueued}},
		{"tenant/status=queued/deep", job.ListFilter{Tenant: "acme", Status: job.StatusQueued, After: deep}},
		{"tenant/status=scheduled", job.ListFilter{Tenant: "acme", Status: job.StatusScheduled}},
		{"tenant/task", job.ListFilter{Tenant: "acme", Task: "task.2"}},
		{"tenant/task/deep", job.ListFilter{Tenant: "acme", Task: "task.2", After: deep}},
		{"tenant/task+status=failed", job.ListFilter{Tenant: "acme", Task: "task.2", Status: job.StatusFailed}},
		{"tenant/created_before=1d", job.ListFilter{Tenant: "acme", CreatedBefore: day}},
		{"tenant/status=failed+created_before=1d", job.ListFilter{Tenant: "acme", Status: job.StatusFailed, CreatedBefore: day}},
		{"small-tenant/first", job.ListFilter{Tenant: "t5"}},
		{"all-tenants/first", job.ListFilter{}},
		{"all-tenants/deep", job.ListFilter{After: deep}},
		{"all-tenants/status=failed", job.ListFilter{Status: job.StatusFailed}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				jobs, _, err := records.List(ctx, bc.f, 50)
				if err != nil || len(jobs) != 50 {
					b.Fatalf("%d jobs, %v", len(jobs), err)
				}
			}
		})
	}
}
