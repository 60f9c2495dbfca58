package job

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ListFilter selects jobs for Store.List; a zero field selects every
// job.
type ListFilter struct {
	Status Status
	Task   string
	// Tenant keeps one tenant's jobs; "" keeps every tenant's (an
	// operator's list).
	Tenant string
	// OlderThan keeps the jobs created at least this long ago.
	OlderThan time.Duration
	// CreatedAfter and CreatedBefore keep the jobs created strictly after
	// and strictly before them; a zero time bounds nothing.
	CreatedAfter, CreatedBefore time.Time
	// After is the Cursor of the last job of the previous page; "" starts
	// at the newest job.
	After Cursor
}

// Cursor is where a page of Store.List ends: the creation time and id of
// its last job, newest first. A job's created_at never changes, so a page
// that starts after a cursor shows the same jobs however many are inserted
// (above it) or change status meanwhile: keyset paging, not an offset.
// It is opaque to clients: base64url of "<created_at in µs>.<id>".
type Cursor string

// cursorOf is the cursor that follows j.
func cursorOf(j Row) Cursor {
	raw := strconv.FormatInt(j.CreatedAt.UnixMicro(), 10) + "." + j.ID
	return Cursor(base64.RawURLEncoding.EncodeToString([]byte(raw)))
}

// ErrBadCursor: a cursor List did not make.
var ErrBadCursor = errors.New("job: not a job list cursor")

func (c Cursor) parse() (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(string(c))
	micros, id, ok := strings.Cut(string(raw), ".")
	n, perr := strconv.ParseInt(micros, 10, 64)
	if err != nil || !ok || perr != nil || !Storable(id) {
		return time.Time{}, "", fmt.Errorf("%w: %q", ErrBadCursor, string(c))
	}
	return time.UnixMicro(n), id, nil
}

// List returns at most limit jobs that match f, newest first, and the
// cursor of the next page ("" when this page is the last). Status matches
// the status a Record reads (a due scheduled job is queued).
//
// Each page is one range of an index of migration 00017, read in order
// from the cursor on: its cost follows limit, not the table's size, and
// nothing counts the matching rows. The statement names only the filters
// f sets, so the planner sees which index serves it on every call (a
// prepared statement that tests each parameter for emptiness would be
// planned for no filter in particular once its plan is cached).
func (s *Store) List(ctx context.Context, f ListFilter, limit int) ([]Row, Cursor, error) {
	if limit <= 0 {
		limit = 50
	}
	q, args, ok, err := listSQL(f, limit+1)
	if err != nil || !ok {
		return nil, "", err
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("job: list jobs: %w", err)
	}
	defer rows.Close()
	var out []Row
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

// listSQL is the statement of List: at most rows jobs that f matches,
// newest first. ok is false when no row can match f.
func listSQL(f ListFilter, rows int) (q string, args []any, ok bool, err error) {
	if !Storable(f.Task) || !Storable(f.Tenant) || !Storable(string(f.Status)) {
		return "", nil, false, nil // no row can hold them
	}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var where []string
	if f.Tenant != "" {
		where = append(where, "tenant = "+arg(f.Tenant))
	}
	if f.Task != "" {
		where = append(where, "task = "+arg(f.Task))
	}
	if f.OlderThan > 0 {
		where = append(where, "created_at < now() - make_interval(secs => "+arg(f.OlderThan.Seconds())+"::float8)")
	}
	if !f.CreatedAfter.IsZero() {
		where = append(where, "created_at > "+arg(f.CreatedAfter)+"::timestamptz")
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+arg(f.CreatedBefore)+"::timestamptz")
	}
	if f.After != "" {
		at, id, err := f.After.parse()
		if err != nil {
			return "", nil, false, err
		}
		where = append(where, "(created_at, id) < ("+arg(at)+"::timestamptz, "+arg(id)+"::text)")
	}
	// One range per stored status the filter reads as: a queued job is
	// stored queued, or scheduled with its time come.
	var ranges [][]string
	switch f.Status {
	case "":
		ranges = [][]string{nil}
	case StatusQueued:
		ranges = [][]string{
			{"status = 'queued'"},
			{"status = 'scheduled'", "not_before <= now()"},
		}
	case StatusScheduled:
		ranges = [][]string{{"status = 'scheduled'", "(not_before IS NULL OR not_before > now())"}}
	default:
		ranges = [][]string{{"status = " + arg(string(f.Status))}}
	}
	const order = ` ORDER BY created_at DESC, id DESC LIMIT `
	n := arg(rows)
	if len(ranges) == 1 {
		q = `SELECT ` + recordColumns + ` FROM jobs` + whereClause(append(where, ranges[0]...)) + order + n
	} else {
		parts := make([]string, len(ranges))
		for i, r := range ranges {
			parts[i] = `(SELECT * FROM jobs` + whereClause(append(slices.Clip(where), r...)) + order + n + `)`
		}
		q = `SELECT ` + recordColumns + ` FROM (` + strings.Join(parts, " UNION ALL ") + `) jobs` + order + n
	}
	return q, args, true, nil
}

func whereClause(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// List lists jobs as Store.List does.
func (e *Submitter) List(ctx context.Context, f ListFilter, limit int) ([]Row, Cursor, error) {
	return e.records.List(ctx, f, limit)
}
