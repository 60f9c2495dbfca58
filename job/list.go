package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ListFilter selects jobs for Records.List; a zero field selects every
// job.
type ListFilter struct {
	Status Status
	Task   string
	Tenant string
	// OlderThan keeps the jobs created at least this long ago.
	OlderThan time.Duration
	// After is the Cursor of the last job of the previous page; "" starts
	// at the newest job.
	After Cursor
}

// Cursor is where a page of Records.List ends: the creation time and id of
// its last job, newest first. A job's created_at never changes, so a page
// that starts after a cursor shows the same jobs however many are inserted
// (above it) or change status meanwhile: keyset paging, not an offset.
type Cursor string

// cursorOf is the cursor that follows j.
func cursorOf(j Record) Cursor {
	return Cursor(strconv.FormatInt(j.CreatedAt.UnixMicro(), 10) + "." + j.ID)
}

// ErrBadCursor: a cursor List did not make.
var ErrBadCursor = errors.New("job: not a job list cursor")

func (c Cursor) parse() (time.Time, string, error) {
	micros, id, ok := strings.Cut(string(c), ".")
	n, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || id == "" || !Storable(id) {
		return time.Time{}, "", fmt.Errorf("%w: %q", ErrBadCursor, string(c))
	}
	return time.UnixMicro(n), id, nil
}

// List returns at most limit jobs that match f, newest first, and the
// cursor of the next page ("" when this page is the last). Status matches
// the status a Record reads (a due scheduled job is queued). It serves the
// operator console; the jobs table has no index on created_at, so a page
// reads the matching rows' (created_at, id) to sort them: cheap for an
// operator's look, not for a hot path.
func (s *Records) List(ctx context.Context, f ListFilter, limit int) ([]Record, Cursor, error) {
	if limit <= 0 {
		limit = 50
	}
	if !Storable(f.Task) || !Storable(f.Tenant) || !Storable(string(f.Status)) {
		return nil, "", nil // no row can hold them
	}
	var (
		afterAt *time.Time
		afterID string
	)
	if f.After != "" {
		at, id, err := f.After.parse()
		if err != nil {
			return nil, "", err
		}
		afterAt, afterID = &at, id
	}
	const q = `SELECT ` + recordColumns + ` FROM jobs
 WHERE ($1 = '' OR (CASE WHEN status = 'scheduled' AND not_before <= now() THEN 'queued' ELSE status END) = $1)
   AND ($2 = '' OR task = $2)
   AND ($3 = '' OR tenant = $3)
   AND ($4::float8 <= 0 OR created_at < now() - make_interval(secs => $4::float8))
   AND ($5::timestamptz IS NULL OR (created_at, id) < ($5::timestamptz, $6))
 ORDER BY created_at DESC, id DESC
 LIMIT $7`
	rows, err := s.db.Query(ctx, q, string(f.Status), f.Task, f.Tenant, f.OlderThan.Seconds(), afterAt, afterID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("job: list jobs: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			return nil, "", fmt.Errorf("job: list jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("job: list jobs: %w", err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	return out, cursorOf(out[limit-1]), nil
}

// CountByStatus counts the jobs in each status (as a Record reads it).
func (s *Records) CountByStatus(ctx context.Context) (map[Status]int64, error) {
	const q = `SELECT CASE WHEN status = 'scheduled' AND not_before <= now() THEN 'queued' ELSE status END, count(*)
  FROM jobs GROUP BY 1`
	rows, err := s.db.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("job: count jobs: %w", err)
	}
	defer rows.Close()
	out := map[Status]int64{}
	for rows.Next() {
		var st Status
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("job: count jobs: %w", err)
		}
		out[st] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: count jobs: %w", err)
	}
	return out, nil
}
