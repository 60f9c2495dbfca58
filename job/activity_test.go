package job_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// TestActivity: the activity of closed minutes is rolled up once and a
// second reader (another gateway) reads the same numbers back, even after
// the jobs behind them change; every bucket's counts equal a count of the
// jobs themselves; and the newest minute shows a job that finished just
// now.
func TestActivity(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := t.Context()
	// 400 jobs created between 10 and about 143 minutes ago, one every 20
	// seconds: a tenth unfinished, the others final up to 89 seconds after
	// their creation, often in a later minute.
	exec(t, pool, `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts,
                  created_at, updated_at, finished_at)
SELECT 'job_act_' || i, 'acme', 'invoices', 'k-' || i, 'invoice.create', 'default', 'invoice:o-' || i, '{}',
       s.status, 1, c.at, c.at, CASE WHEN s.status <> 'queued' THEN c.at + make_interval(secs => i % 90) END
  FROM generate_series(1, 400) i,
       LATERAL (SELECT CASE WHEN i % 10 = 0 THEN 'queued' WHEN i % 10 IN (1, 2) THEN 'failed'
                            WHEN i % 10 = 3 THEN 'cancelled' ELSE 'succeeded' END AS status) s,
       LATERAL (SELECT now() - interval '10 minutes' - make_interval(secs => i * 20) AS at) c`)

	now := time.Now()
	since := now.Add(-3 * time.Hour).Truncate(time.Minute)
	first := job.NewStore(pool)
	before := dbNow(t, pool)
	acts, err := first.Activity(ctx, since, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	after := dbNow(t, pool)
	if want := int(now.Sub(since)/time.Minute) + 1; len(acts) != want {
		t.Fatalf("%d buckets from %s to %s, want %d", len(acts), since, now, want)
	}
	var started, succeeded, failed int
	for i, a := range acts {
		if want := since.Add(time.Duration(i) * time.Minute); !a.At.Equal(want) {
			t.Fatalf("bucket %d starts at %s, want %s", i, a.At, want)
		}
		var s, ok, bad int
		if err := pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM jobs WHERE created_at >= $1 AND created_at < $2),
       (SELECT count(*) FROM jobs WHERE status = 'succeeded' AND finished_at >= $1 AND finished_at < $2),
       (SELECT count(*) FROM jobs WHERE status = 'failed' AND finished_at >= $1 AND finished_at < $2)`,
			a.At, a.At.Add(time.Minute)).Scan(&s, &ok, &bad); err != nil {
			t.Fatal(err)
		}
		if a.Started != s || a.Succeeded != ok || a.Failed != bad {
			t.Errorf("bucket %s: %d started, %d succeeded, %d failed; the jobs say %d, %d, %d",
				a.At, a.Started, a.Succeeded, a.Failed, s, ok, bad)
		}
		if a.Succeeded+a.Failed > 0 && (a.P50 <= 0 || a.P99 < a.P50 || a.P99 >= 90*time.Second) {
			t.Errorf("bucket %s: p50 %s, p99 %s; want 0 < p50 <= p99 < 90s", a.At, a.P50, a.P99)
		}
		started, succeeded, failed = started+a.Started, succeeded+a.Succeeded, failed+a.Failed
	}
	if started != 400 || succeeded != 240 || failed != 80 {
		t.Errorf("the window counts %d started, %d succeeded, %d failed; want 400, 240, 80", started, succeeded, failed)
	}

	// Every minute that ended ActivityGrace before the read is rolled up;
	// none that ended less than ActivityGrace after it is.
	var kept int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM job_activity WHERE width_secs = 60`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	closed := func(at time.Time) int {
		n := 0
		for _, a := range acts {
			if !a.At.Add(time.Minute + job.ActivityGrace).After(at) {
				n++
			}
		}
		return n
	}
	if kept < closed(before) || kept > closed(after) {
		t.Errorf("%d minutes rolled up, want between %d and %d (those closed for %s)", kept, closed(before), closed(after), job.ActivityGrace)
	}

	// The jobs of the rolled-up minutes change (retention, a re-queue);
	// a second reader shows the numbers kept, as the first did.
	exec(t, pool, `DELETE FROM jobs WHERE id LIKE 'job_act_%'`)
	second := job.NewStore(pool)
	again, err := second.Activity(ctx, since, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range kept {
		if !again[i].At.Equal(acts[i].At) || !sameCounts(again[i], acts[i]) {
			t.Errorf("bucket %s: the second reader reads %+v, the first read %+v", acts[i].At, again[i], acts[i])
		}
	}

	// A job created and finished just now is in the newest buckets, read
	// from the jobs.
	exec(t, pool, `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status)
VALUES ('job_act_now', 'acme', 'invoices', 'k-now', 'invoice.create', 'default', 'invoice:o-now', '{}', 'processing')`)
	if err := second.SetStatus(ctx, "job_act_now", job.StatusSucceeded, 1, "", ""); err != nil {
		t.Fatal(err)
	}
	now = time.Now()
	latest, err := second.Activity(ctx, since, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	started, succeeded = 0, 0
	for _, a := range latest[kept:] {
		started, succeeded = started+a.Started, succeeded+a.Succeeded
	}
	if started != 1 || succeeded != 1 {
		t.Errorf("the buckets not rolled up count %d started and %d succeeded, want the job finished just now: 1 and 1", started, succeeded)
	}
}

func sameCounts(a, b job.Activity) bool {
	return a.Started == b.Started && a.Succeeded == b.Succeeded && a.Failed == b.Failed && a.P50 == b.P50 && a.P99 == b.P99
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(t.Context(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// TestActivityRetention: the jobs retention deletes the kept activity
// buckets that began before it and keeps the others.
func TestActivityRetention(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	exec(t, pool, `
INSERT INTO job_activity (at, width_secs, started, succeeded, failed, p50_secs, p99_secs)
VALUES (date_trunc('hour', now()) - interval '40 days', 3600, 5, 4, 1, 0.5, 2),
       (date_trunc('hour', now()) - interval '2 days', 3600, 5, 4, 1, 0.5, 2)`)
	if _, err := job.NewStore(pool).DeleteFinished(t.Context(), job.DefaultRetention, 10, nil); err != nil {
		t.Fatal(err)
	}
	var left []time.Time
	rows, err := pool.Query(t.Context(), `SELECT at FROM job_activity ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		left = append(left, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || time.Since(left[0]) > 3*24*time.Hour {
		t.Errorf("after the retention the buckets kept begin at %v, want only the one of 2 days ago", left)
	}
}
