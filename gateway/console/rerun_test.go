package console_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
)

// TestRerun: a cancelled job's page offers "Re-run as a new job"; the
// confirmed re-run leads to a new queued job with the same task, tenant
// and payload; each job's page links to the other, explain tells the
// link, and the audit trail keeps the action on both jobs. A queued job
// has no such action.
func TestRerun(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	id := v.invoice(t, "acme", "rerun-1", "o-rerun-1")
	if doc := v.page(t, "/admin/ui/jobs/"+id); byID(doc, "action-rerun") != nil {
		t.Error("a queued job's page offers a re-run")
	}
	if resp := v.postForm(t, "/admin/ui/jobs/"+id+"/rerun", "fay", url.Values{}); resp.StatusCode != http.StatusConflict {
		t.Errorf("re-run of a queued job: %d, want 409", resp.StatusCode)
	}
	if _, _, err := v.records.CancelByID(ctx, id); err != nil {
		t.Fatal(err)
	}
	if doc := v.page(t, "/admin/ui/jobs/"+id); byID(doc, "action-rerun") == nil {
		t.Fatal("a cancelled job's page offers no re-run")
	}
	if got := text(byID(v.page(t, "/admin/ui/jobs/"+id+"/rerun"), "confirm")); got != "Re-run job" {
		t.Errorf("the confirmation's button reads %q", got)
	}
	resp := v.postForm(t, "/admin/ui/jobs/"+id+"/rerun", "fay", url.Values{"reason": {"customer retried by phone"}})
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/ui/jobs/job_") || !strings.HasSuffix(loc, "?done=rerun") {
		t.Fatalf("re-run: %d Location %q", resp.StatusCode, loc)
	}
	newID := strings.TrimSuffix(strings.TrimPrefix(loc, "/admin/ui/jobs/"), "?done=rerun")
	if newID == id {
		t.Fatal("the re-run kept the old job's id")
	}
	old, _ := v.records.ByID(ctx, id)
	rec, err := v.records.ByID(ctx, newID)
	if err != nil || rec.Status != job.StatusQueued || rec.Task != old.Task || rec.Tenant != "acme" || string(rec.Payload) != string(old.Payload) {
		t.Fatalf("the new job: %+v, %v", rec, err)
	}

	newPage := v.page(t, loc)
	if of := byID(newPage, "rerun-of"); of == nil || text(of) != id {
		t.Errorf("the new job's page does not say it re-runs %s", id)
	}
	if flash := text(byID(newPage, "flash")); !strings.HasPrefix(flash, "Re-run:") {
		t.Errorf("the new job's flash reads %q", flash)
	}
	if as := byID(v.page(t, "/admin/ui/jobs/"+id), "rerun-as"); as == nil || text(as) != newID {
		t.Errorf("the old job's page does not link to its re-run %s", newID)
	}

	x := &explain.Explainer{DB: v.pool, Keys: v.store}
	story, err := x.Job(ctx, newID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := explain.WriteText(&out, story); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "re-run of "+id) || !strings.Contains(out.String(), "rerun by fay via console") {
		t.Errorf("explain of the new job:\n%s", out.String())
	}
	for _, j := range []string{id, newID} {
		acts, err := v.records.ActionsOnJob(ctx, j)
		if err != nil || len(acts) == 0 || acts[len(acts)-1].Action != "rerun" || acts[len(acts)-1].Reason != "customer retried by phone" {
			t.Errorf("the audit trail of %s: %+v, %v", j, acts, err)
		}
	}
	// A second re-run of the same job leads to the same new job.
	resp = v.postForm(t, "/admin/ui/jobs/"+id+"/rerun", "fay", url.Values{})
	if got := resp.Header.Get("Location"); got != loc {
		t.Errorf("a second re-run leads to %q, want %q", got, loc)
	}
}
