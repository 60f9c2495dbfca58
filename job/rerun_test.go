package job_test

import (
	"errors"
	"testing"

	"github.com/idemgate/idemgate/job"
)

// A cancelled job is re-run as a new job with its tenant, task and
// payload; the two are linked both ways; a second re-run returns the same
// new job; a job that has not ended is not re-run.
func TestRerun(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	ids := v.submit(t, 2)
	spec := func(task string) (*job.Spec, bool) { return invoiceSpec(task), task == "invoice.create" }
	if _, err := v.e.Rerun(ctx, ids[1], spec); !errors.Is(err, job.ErrNotRerunnable) {
		t.Fatalf("re-run of a queued job: %v, want ErrNotRerunnable", err)
	}
	if _, _, err := v.e.CancelByID(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	old, _ := v.e.Records().ByID(ctx, ids[0])
	rec, err := v.e.Rerun(ctx, ids[0], spec)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == ids[0] || rec.Status != job.StatusQueued || rec.Tenant != old.Tenant || rec.Task != old.Task || string(rec.Payload) != string(old.Payload) {
		t.Fatalf("the re-run is %+v, want a new queued job with %s's tenant, task and payload", rec, ids[0])
	}
	if again, err := v.e.Rerun(ctx, ids[0], spec); err != nil || again.ID != rec.ID {
		t.Errorf("a second re-run: %s, %v; want the same job %s", again.ID, err, rec.ID)
	}
	of, as, err := v.e.Records().Reruns(ctx, ids[0])
	if err != nil || of != "" || len(as) != 1 || as[0] != rec.ID {
		t.Errorf("the old job's links: of %q, as %v, %v", of, as, err)
	}
	if of, as, err := v.e.Records().Reruns(ctx, rec.ID); err != nil || of != ids[0] || len(as) != 0 {
		t.Errorf("the new job's links: of %q, as %v, %v", of, as, err)
	}
	if _, err := v.e.Rerun(ctx, ids[0], func(string) (*job.Spec, bool) { return nil, false }); !errors.Is(err, job.ErrUnknownTask) {
		t.Errorf("a re-run of an undeclared task: %v", err)
	}
}
