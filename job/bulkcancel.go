package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// MaxBulkCount is the most jobs a bulk action's confirmation counts: a
// count of MaxBulkCount means that many or more.
const MaxBulkCount = 10000

// cancellable are the statuses a cancel acts on that f selects: the
// runnable ones, or f.Status alone when it is one of them.
func cancellable(f ListFilter) []Status {
	var out []Status
	for _, st := range Statuses() {
		if st.Runnable() && (f.Status == "" || f.Status == st) {
			out = append(out, st)
		}
	}
	return out
}

// CancellableMatching returns at most limit jobs that f matches and that
// a cancel acts on (scheduled, queued, processing or retrying), newest
// first. f.After is not read.
//
// Each status is one bounded range of an index of migration 00017 (List
// with that status), so the cost follows limit, not the table's size.
func (s *Store) CancellableMatching(ctx context.Context, f ListFilter, limit int) ([]Row, error) {
	f.After = ""
	var out []Row
	for _, st := range cancellable(f) {
		f.Status = st
		page, _, err := s.List(ctx, f, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
	}
	slices.SortFunc(out, func(a, b Row) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out[:min(len(out), limit)], nil
}

// CountCancellable counts the jobs CancellableMatching would return with
// no limit, up to limit: a count of limit means limit or more.
func (s *Store) CountCancellable(ctx context.Context, f ListFilter, limit int) (int, error) {
	f.After = ""
	total := 0
	for _, st := range cancellable(f) {
		f.Status = st
		q, args, ok, err := listSQL(f, limit-total)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, nil
		}
		var n int
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM (`+q+`) m`, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("job: count cancellable jobs: %w", err)
		}
		if total += n; total >= limit {
			return limit, nil
		}
	}
	return total, nil
}

// CancelMatching cancels at most limit of the jobs f matches, the newest
// first, each through CancelByID (the cancel of one job: its semantics,
// its task deleted, its callback). It returns the jobs it cancelled, as
// each cancel left them (cancelled, or cancelling when an attempt was in
// flight). A job that finished or went away meanwhile is skipped. A store
// that fails stops it: the jobs cancelled so far come with the error.
func (e *Submitter) CancelMatching(ctx context.Context, f ListFilter, limit int) ([]Row, error) {
	jobs, err := e.records.CancellableMatching(ctx, f, limit)
	if err != nil {
		return nil, err
	}
	var done []Row
	for _, j := range jobs {
		rec, _, err := e.CancelByID(ctx, j.ID)
		switch {
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrNotCancellable):
			continue
		case err != nil:
			return done, err
		}
		done = append(done, rec)
	}
	return done, nil
}

// CountCancellable counts as Store.CountCancellable does.
func (e *Submitter) CountCancellable(ctx context.Context, f ListFilter, limit int) (int, error) {
	return e.records.CountCancellable(ctx, f, limit)
}
