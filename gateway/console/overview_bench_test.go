package console_test

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/reconcile"
)

// BenchmarkOverviewPage times the console's overview (jobs by status, the
// two activity charts and the stuck-jobs check) at each size in IDEMGATE_BENCH_JOBS (a comma list
// of job counts; default 1600). Each size is seeded with INSERT … SELECT
// generate_series into a schema of the benchmark's own, dropped after,
// with the status mix of a retained history (mostly succeeded), and
// vacuumed as autovacuum would. The metric first-ms is the first request
// after start, timed apart from the loop: it rolls up the charts' closed
// buckets, which the loop then reads from job_activity:
//
//	IDEMGATE_BENCH_JOBS=1600,300000,3000000 go test -run '^$' -bench BenchmarkOverviewPage -benchtime 20x ./gateway/console/
func BenchmarkOverviewPage(b *testing.B) {
	for _, n := range benchJobCounts(b) {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			srv := seededConsole(b, n, true)
			get := func() {
				resp, err := http.Get(srv.URL + console.DefaultPrefix + "/")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("overview: %d", resp.StatusCode)
				}
			}
			start := time.Now()
			get() // the first request after start: what is kept between requests is empty
			first := time.Since(start)
			b.ReportAllocs()
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
		})
	}
}

// seedJobs inserts n jobs: 1% queued and 1% retrying, changed in the
// last ten minutes (none stuck), 4% failed, 2% cancelled and the rest
// succeeded, finished over the last 30 days; then it vacuums and analyzes

// seededConsole serves the console over a schema of its own seeded with
// n jobs; stuck adds the overview's stuck-jobs check.
func seededConsole(b *testing.B, n int, stuck bool) *httptest.Server {
	pool := testkit.Pool(b)
	seedJobs(b, pool, n)
	opts := console.Options{
		Stories: &explain.Explainer{DB: pool}, Keys: memstore.New(), StoreName: "memory",
		Requests: gateway.NewRecentRequests(time.Now),
		Jobs:     job.NewStore(pool),
		Logger:   slog.New(slog.DiscardHandler),
	}
	if stuck {
		opts.Stuck = console.StuckJobs(pool, reconcile.Options{StuckAfter: explain.DefaultStuckAfter})
	}
	h, err := console.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv
}

// the table, as autovacuum would.
func seedJobs(b testing.TB, pool *pgxpool.Pool, n int) {
	b.Helper()
	ctx := b.Context()
	const q = `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts,
                  created_at, updated_at, finished_at)
SELECT 'job_' || md5(i::text), 'tenant-' || (i % 20), 'invoices', 'k-' || i, 'invoice.create', 'default',
       'invoice:o-' || i, '{"order_id":"o"}',
       s.status, 1, t.at, t.at, CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled') THEN t.at END
  FROM generate_series(1, $1::int) i,
       LATERAL (SELECT CASE WHEN i % 100 = 0 THEN 'queued' WHEN i % 100 = 1 THEN 'retrying'
                            WHEN i % 100 BETWEEN 2 AND 5 THEN 'failed' WHEN i % 100 IN (6, 7) THEN 'cancelled'
                            ELSE 'succeeded' END AS status) s,
       LATERAL (SELECT CASE WHEN s.status IN ('queued', 'retrying') THEN now() - make_interval(secs => i % 600)
                            ELSE now() - make_interval(secs => (i::float8 / $1) * 30 * 86400) END AS at) t`
	if _, err := pool.Exec(ctx, q, n); err != nil {
		b.Fatalf("seed %d jobs: %v", n, err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		b.Fatalf("vacuum: %v", err)
	}
}

// BenchmarkJobsPage times the console's jobs list (its first page, a
// status, a tenant's status, a task and a time range) and its search (a
// job id, an idempotency key, a business key, a payload field matching
// nothing over the default hour and over a day) at each size in IDEMGATE_BENCH_JOBS, seeded as
// BenchmarkOverviewPage seeds:
//
//	IDEMGATE_BENCH_JOBS=1600,300000,3000000 go test -run '^$' -bench BenchmarkJobsPage -benchtime 20x ./gateway/console/
func BenchmarkJobsPage(b *testing.B) {
	for _, n := range benchJobCounts(b) {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			srv := seededConsole(b, n, false)
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			mid := time.Now().Add(-15 * 24 * time.Hour).UTC().Format("2006-01-02T15:04:05")
			for _, list := range []string{"/jobs", "/jobs?status=failed", "/jobs?tenant=tenant-3&status=failed",
				"/jobs?task=invoice.create", "/jobs?created_before=" + mid,
				"/search?q=job_" + md5hex("7"), "/search?q=k-7", "/search?q=invoice:o-7", "/search?q=order_id=none", "/search?q=order_id=none&within=24h"} {
				name := strings.ReplaceAll(list, "/", "_")
				if before, _, ok := strings.Cut(name, "created_before="); ok {
					name = before + "created_before=15d-ago"
				}
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						resp, err := noFollow.Get(srv.URL + console.DefaultPrefix + list)
						if err != nil {
							b.Fatal(err)
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusSeeOther {
							b.Fatalf("%s: %d", list, resp.StatusCode)
						}
					}
				})
			}
		})
	}
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// benchJobCounts is the job counts in IDEMGATE_BENCH_JOBS (comma
// separated), or 1600 when it is unset.
func benchJobCounts(b *testing.B) []int {
	s := os.Getenv("IDEMGATE_BENCH_JOBS")
	if s == "" {
		return []int{1600}
	}
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("IDEMGATE_BENCH_JOBS: %q is not a job count", f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}
