package job

import (
	"context"
	"fmt"
	"time"
)

// Activity is what happened to jobs in one bucket of time.
type Activity struct {
	// At is where the bucket starts.
	At time.Time
	// Started counts the jobs created in the bucket.
	Started int
	// Succeeded and Failed count the jobs that became succeeded or failed
	// in the bucket (by finished_at), whenever they were created.
	Succeeded, Failed int
	// P50 and P99 are the median and 99th percentile time from creation
	// to a final status of the jobs that became final in the bucket.
	// They are 0 when none did.
	P50, P99 time.Duration
}

// ActivityGrace is how long after a bucket ends Activity still reads it
// from the jobs before it rolls it up for good.
//
// A job's created_at and finished_at are the database's now() when its
// transaction began, and the row is seen only once it commits. A
// transaction that commits more than ActivityGrace after it began can
// land in a bucket already rolled up; the rollup does not count it.
const ActivityGrace = 2 * time.Minute

// activitySQL reads the buckets [$1, $2) of $3 seconds: those rolled up
// from job_activity, the others from jobs, in one range of jobs_created
// and one of jobs_finished from the oldest bucket not rolled up to $2. It
// rolls up the buckets it read from jobs that ended more than $4 seconds
// before the database's now(). Two readers that roll up one bucket at
// once write it once (ON CONFLICT DO NOTHING) with the same counts.
const activitySQL = `
WITH stored AS (
    SELECT at, started, succeeded, failed, p50_secs, p99_secs
      FROM job_activity
     WHERE at >= $1 AND at < $2 AND width_secs = $3
), missing AS (
    SELECT b AS at
      FROM generate_series($1::timestamptz, $2::timestamptz - make_interval(secs => $3), make_interval(secs => $3)) b
     WHERE b NOT IN (SELECT at FROM stored)
), live_from AS (
    SELECT COALESCE(min(at), $2) AS t FROM missing
), started AS (
    SELECT date_bin(make_interval(secs => $3), created_at, $1) AS at, count(*) AS n
      FROM jobs
     WHERE created_at >= (SELECT t FROM live_from) AND created_at < $2
     GROUP BY 1
), finished AS (
    SELECT date_bin(make_interval(secs => $3), finished_at, $1) AS at,
           count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)) AS p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)) AS p99
      FROM jobs
     WHERE finished_at >= (SELECT t FROM live_from) AND finished_at < $2
     GROUP BY 1
), live AS (
    SELECT at, sum(started)::bigint AS started, sum(succeeded)::bigint AS succeeded, sum(failed)::bigint AS failed,
           max(p50)::float8 AS p50_secs, max(p99)::float8 AS p99_secs
      FROM (SELECT at, true AS missing, 0::bigint AS started, 0::bigint AS succeeded, 0::bigint AS failed,
                   0::float8 AS p50, 0::float8 AS p99 FROM missing
            UNION ALL SELECT at, false, n, 0, 0, 0, 0 FROM started
            UNION ALL SELECT at, false, 0, succeeded, failed, p50, p99 FROM finished) e
     GROUP BY at
    HAVING bool_or(missing)
), rolled AS (
    INSERT INTO job_activity (at, width_secs, started, succeeded, failed, p50_secs, p99_secs)
    SELECT at, $3, started, succeeded, failed, p50_secs, p99_secs
      FROM live
     WHERE at + make_interval(secs => $3 + $4) <= now()
    ON CONFLICT DO NOTHING
)
SELECT at, started, succeeded, failed, p50_secs, p99_secs FROM stored
UNION ALL
SELECT at, started, succeeded, failed, p50_secs, p99_secs FROM live
 ORDER BY at`

// Activity returns the buckets of width bucket from since up to the one
// that holds now, oldest first, empty ones included. Bucket is a whole
// number of seconds.
//
// A bucket is defined by event time, so that it never changes once it
// has ended: the jobs created in it, and the jobs that became final in
// it. A bucket that ended more than ActivityGrace ago is computed once
// and kept in job_activity (written by whichever reader needs it first,
// so every gateway shows the same numbers). Only the others are read
// from jobs, so a warm read costs the traffic of the newest bucket and
// the grace, whatever the table's size. A job deleted or re-queued later
// stays counted in a bucket already kept. The jobs retention deletes the
// kept buckets past it (DeleteFinished).
func (s *Store) Activity(ctx context.Context, since, now time.Time, bucket time.Duration) ([]Activity, error) {
	width := int(bucket / time.Second)
	if width < 1 || bucket%time.Second != 0 {
		return nil, fmt.Errorf("job: activity: bucket %s is not a whole number of seconds", bucket)
	}
	end := since
	for end.Before(now) {
		end = end.Add(bucket)
	}
	if !end.After(since) {
		return nil, nil
	}
	rows, err := s.db.Query(ctx, activitySQL, since, end, width, int(ActivityGrace/time.Second))
	if err != nil {
		return nil, fmt.Errorf("job: activity: %w", err)
	}
	defer rows.Close()
	var out []Activity
	for rows.Next() {
		var a Activity
		var p50, p99 float64
		if err := rows.Scan(&a.At, &a.Started, &a.Succeeded, &a.Failed, &p50, &p99); err != nil {
			return nil, fmt.Errorf("job: activity: %w", err)
		}
		a.P50 = time.Duration(p50 * float64(time.Second))
		a.P99 = time.Duration(p99 * float64(time.Second))
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: activity: %w", err)
	}
	return out, nil
}
