package job

import (
	"context"
	"fmt"
	"net/url"
	"time"
)

// MaxBulk is the most jobs one bulk action acts on; the rest of the jobs
// its filter matches are left for the next one.
const MaxBulk = 1000

// FailedScan is how many of the newest failed jobs FailedGroups and
// CountFailed read at most: their counts are capped there.
const FailedScan = 10000

// FailedFilter chooses failed jobs: by task, by error (the job's last
// error, exactly), and by when they failed (updated_at in [Since,
// Until)). Zero fields match every job.
type FailedFilter struct {
	Task, Error  string
	Since, Until time.Time
}

// String is the filter as the audit trail keeps it: a query string.
func (f FailedFilter) String() string {
	q := url.Values{}
	q.Set("status", string(StatusFailed))
	if f.Task != "" {
		q.Set("task", f.Task)
	}
	if f.Error != "" {
		q.Set("error", f.Error)
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339))
	}
	return q.Encode()
}

// failedWhere is the condition of FailedFilter over jobs, its arguments
// from $1: task, error, since, until.
const failedWhere = `status = 'failed' AND ($1 = '' OR task = $1) AND ($2 = '' OR last_error = $2)
   AND ($3::timestamptz IS NULL OR updated_at >= $3) AND ($4::timestamptz IS NULL OR updated_at < $4)`

func (f FailedFilter) args() []any {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	return []any{f.Task, f.Error, since, until}
}

// FailedMatching returns at most limit failed jobs that f matches, newest
// first (the index jobs_status reads them in that order).
func (s *Store) FailedMatching(ctx context.Context, f FailedFilter, limit int) ([]Row, error) {
	rows, err := s.db.Query(ctx, `SELECT `+recordColumns+` FROM jobs WHERE `+failedWhere+` ORDER BY updated_at DESC LIMIT $5`,
		append(f.args(), limit)...)
	if err != nil {
		return nil, fmt.Errorf("job: failed jobs: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("job: failed jobs: %w", err)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// CountFailed counts the failed jobs f matches, up to limit: a count of
// limit means limit or more.
func (s *Store) CountFailed(ctx context.Context, f FailedFilter, limit int) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs WHERE `+failedWhere+` LIMIT $5) m`,
		append(f.args(), limit)...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("job: count failed jobs: %w", err)
	}
	return n, nil
}

// FailedGroup is the failed jobs of one task that ended on one error.
type FailedGroup struct {
	Task, Error string
	// Count is how many of the newest FailedScan failed jobs are in the
	// group.
	Count int
	// Latest is when the newest of them failed.
	Latest time.Time
}

// FailedGroups groups the newest FailedScan failed jobs by task and last
// error, the largest groups first, at most limit groups. Reading a
// bounded number of rows keeps it fast on a table of millions; the
// counts are then those of the newest jobs.
func (s *Store) FailedGroups(ctx context.Context, limit int) ([]FailedGroup, error) {
	rows, err := s.db.Query(ctx, `
SELECT task, COALESCE(last_error, ''), count(*), max(updated_at)
  FROM (SELECT task, last_error, updated_at FROM jobs WHERE status = 'failed' ORDER BY updated_at DESC LIMIT $1) f
 GROUP BY 1, 2
 ORDER BY 3 DESC, 4 DESC
 LIMIT $2`, FailedScan, limit)
	if err != nil {
		return nil, fmt.Errorf("job: failed groups: %w", err)
	}
	defer rows.Close()
	var out []FailedGroup
	for rows.Next() {
		var g FailedGroup
		if err := rows.Scan(&g.Task, &g.Error, &g.Count, &g.Latest); err != nil {
			return nil, fmt.Errorf("job: failed groups: %w", err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}
