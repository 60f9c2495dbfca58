package job

import (
	"context"
	"fmt"
	"time"
)

// Activity is what became of the jobs created in one bucket of time.
type Activity struct {
	// At is where the bucket starts.
	At time.Time
	// Started counts the jobs created in the bucket; Succeeded and
	// Failed those of them that have succeeded or failed since.
	Started, Succeeded, Failed int
	// P50 and P99 are the median and 99th percentile time from creation
	// to a final status of the bucket's jobs that have one; 0 when none
	// has.
	P50, P99 time.Duration
}

// MaxActivityRows is the most jobs Activity reads: the newest of its
// window. A window that holds more is counted from these alone.
const MaxActivityRows = 200000

// Activity returns the jobs created since since, bucket by bucket, oldest
// first, one Activity per bucket up to now (empty buckets included), and
// whether the window held more than MaxActivityRows jobs.
//
// It reads one range of jobs_created, newest first, at most
// MaxActivityRows rows, so its cost follows the window's traffic, not the
// table's size.
func (s *Records) Activity(ctx context.Context, since, now time.Time, bucket time.Duration) ([]Activity, bool, error) {
	rows, err := s.db.Query(ctx, `
SELECT date_bin(make_interval(secs => $2), created_at, $1) AS b, count(*),
       count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
       COALESCE(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)), 0),
       COALESCE(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)), 0),
       sum(count(*)) OVER ()
  FROM (SELECT created_at, status, finished_at FROM jobs WHERE created_at >= $1
         ORDER BY created_at DESC, id DESC LIMIT $3) j
 GROUP BY 1 ORDER BY 1`, since, bucket.Seconds(), MaxActivityRows)
	if err != nil {
		return nil, false, fmt.Errorf("job: activity: %w", err)
	}
	defer rows.Close()
	byBucket := map[int64]Activity{}
	total := int64(0)
	for rows.Next() {
		var a Activity
		var p50, p99 float64
		if err := rows.Scan(&a.At, &a.Started, &a.Succeeded, &a.Failed, &p50, &p99, &total); err != nil {
			return nil, false, fmt.Errorf("job: activity: %w", err)
		}
		a.P50 = time.Duration(p50 * float64(time.Second))
		a.P99 = time.Duration(p99 * float64(time.Second))
		byBucket[a.At.UnixMicro()] = a
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("job: activity: %w", err)
	}
	var out []Activity
	for at := since; at.Before(now); at = at.Add(bucket) {
		a, ok := byBucket[at.UnixMicro()]
		if !ok {
			a = Activity{At: at}
		}
		out = append(out, a)
	}
	return out, total >= MaxActivityRows, nil
}
