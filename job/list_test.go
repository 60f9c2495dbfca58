package job_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// List filters by status, task, tenant and age, newest first, and refuses
// a cursor it did not make.
func TestListFilters(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	ids := v.submit(t, 3) // oldest first
	if err := v.e.Records().SetStatus(ctx, ids[1], job.StatusFailed, 3, "", "boom"); err != nil {
		t.Fatal(err)
	}
	v.exec(t, `UPDATE jobs SET created_at = now() - interval '2 hours' WHERE id = $1`, ids[0])
	records := job.NewStore(v.pool)
	list := func(f job.ListFilter) []string {
		t.Helper()
		jobs, next, err := records.List(ctx, f, 10)
		if err != nil || next != "" {
			t.Fatalf("List(%+v): next %q, %v", f, next, err)
		}
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	if got, want := list(job.ListFilter{Tenant: "acme"}), []string{ids[2], ids[1], ids[0]}; !slices.Equal(got, want) {
		t.Errorf("acme's jobs %v, want newest first %v", got, want)
	}
	if got := list(job.ListFilter{Status: job.StatusFailed}); !slices.Equal(got, []string{ids[1]}) {
		t.Errorf("failed: %v", got)
	}
	if got := list(job.ListFilter{OlderThan: time.Hour}); !slices.Equal(got, []string{ids[0]}) {
		t.Errorf("older than 1h: %v", got)
	}
	if got := list(job.ListFilter{Task: "no.such.task"}); len(got) != 0 {
		t.Errorf("an unknown task: %v", got)
	}
	if got := list(job.ListFilter{Tenant: "globex"}); len(got) != 0 {
		t.Errorf("another tenant: %v", got)
	}
	for _, bad := range []job.Cursor{"x", "12.", ".job_1", "1x.job_1"} {
		if _, _, err := records.List(ctx, job.ListFilter{After: bad}, 10); !errors.Is(err, job.ErrBadCursor) {
			t.Errorf("cursor %q: %v, want ErrBadCursor", bad, err)
		}
	}
	counts, err := records.CountByStatusUpTo(ctx, 1000)
	if err != nil || counts[job.StatusQueued] != 2 || counts[job.StatusFailed] != 1 {
		t.Errorf("counts %v, %v", counts, err)
	}
}

// A due scheduled job is listed as queued, not as scheduled; created_after
// and created_before bound the creation time; a page ends with a cursor
// that the next page starts after, across the two ranges status=queued
// reads.
func TestListStatusAndTimeBounds(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	ids := v.submit(t, 5) // oldest first
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i, id := range ids {
		v.exec(t, `UPDATE jobs SET created_at = $2 WHERE id = $1`, id, base.Add(time.Duration(i)*time.Minute))
	}
	// ids[1] and ids[3]: scheduled and due (queued as read); ids[2]:
	// scheduled for later; ids[0], ids[4]: queued.
	v.exec(t, `UPDATE jobs SET status = 'scheduled', not_before = now() - interval '1 second' WHERE id = ANY($1)`, []string{ids[1], ids[3]})
	v.exec(t, `UPDATE jobs SET status = 'scheduled', not_before = now() + interval '1 hour' WHERE id = $1`, ids[2])
	records := job.NewStore(v.pool)
	all := func(f job.ListFilter, limit int) []string {
		t.Helper()
		var out []string
		for {
			jobs, next, err := records.List(ctx, f, limit)
			if err != nil {
				t.Fatalf("List(%+v): %v", f, err)
			}
			for _, j := range jobs {
				out = append(out, j.ID)
			}
			if next == "" {
				return out
			}
			f.After = next
		}
	}
	for _, limit := range []int{1, 2, 10} {
		if got, want := all(job.ListFilter{Tenant: "acme", Status: job.StatusQueued}, limit), []string{ids[4], ids[3], ids[1], ids[0]}; !slices.Equal(got, want) {
			t.Errorf("queued, %d a page: %v, want %v", limit, got, want)
		}
	}
	if got, want := all(job.ListFilter{Tenant: "acme", Status: job.StatusScheduled}, 10), []string{ids[2]}; !slices.Equal(got, want) {
		t.Errorf("scheduled: %v, want %v", got, want)
	}
	got := all(job.ListFilter{Tenant: "acme", CreatedAfter: base, CreatedBefore: base.Add(4 * time.Minute)}, 2)
	if want := []string{ids[3], ids[2], ids[1]}; !slices.Equal(got, want) {
		t.Errorf("created strictly between the first and the last: %v, want %v", got, want)
	}
}
