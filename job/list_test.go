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
	records := job.NewRecords(v.pool)
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
	counts, err := records.CountByStatus(ctx)
	if err != nil || counts[job.StatusQueued] != 2 || counts[job.StatusFailed] != 1 {
		t.Errorf("counts %v, %v", counts, err)
	}
}
