package job_test

import (
	"slices"
	"testing"

	"github.com/idemgate/idemgate/job"
)

// CancelMatching cancels the newest jobs a filter matches, at most its
// limit, skips the ones a cancel does not act on, and the count says how
// many more are left.
func TestCancelMatching(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	ids := v.submit(t, 5) // oldest first, all queued
	if err := v.e.Records().SetStatus(ctx, ids[4], job.StatusFailed, 3, "", "boom"); err != nil {
		t.Fatal(err)
	}
	v.exec(t, `UPDATE jobs SET status = 'retrying' WHERE id = $1`, ids[3])
	f := job.ListFilter{Tenant: "acme"}
	n, err := v.e.CountCancellable(ctx, f, job.MaxBulkCount)
	if err != nil || n != 4 {
		t.Fatalf("CountCancellable = %d, %v; want 4 (the failed job is not cancellable)", n, err)
	}
	if n, _ := v.e.CountCancellable(ctx, f, 3); n != 3 {
		t.Errorf("CountCancellable capped at 3 = %d", n)
	}
	if n, _ := v.e.CountCancellable(ctx, job.ListFilter{Status: job.StatusFailed}, 10); n != 0 {
		t.Errorf("failed jobs counted as cancellable: %d", n)
	}

	done, err := v.e.CancelMatching(ctx, f, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range done {
		got = append(got, r.ID)
		if r.Status != job.StatusCancelled {
			t.Errorf("%s is %s after the cancel, want cancelled", r.ID, r.Status)
		}
	}
	if want := []string{ids[3], ids[2]}; !slices.Equal(got, want) {
		t.Errorf("cancelled %v, want the newest two cancellable %v", got, want)
	}
	if n, _ := v.e.CountCancellable(ctx, f, job.MaxBulkCount); n != 2 {
		t.Errorf("left after the first cancel: %d, want 2", n)
	}
	if done, err := v.e.CancelMatching(ctx, job.ListFilter{Status: job.StatusQueued, Task: "no.such.task"}, 10); err != nil || len(done) != 0 {
		t.Errorf("a filter matching nothing cancelled %d, %v", len(done), err)
	}
	rec, err := v.e.Records().ByID(ctx, ids[4])
	if err != nil || rec.Status != job.StatusFailed {
		t.Errorf("the failed job is %s, %v; a bulk cancel leaves it", rec.Status, err)
	}
}
