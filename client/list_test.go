package client

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/openapi"
)

func listReply(next string, ids ...string) reply {
	items := ""
	for i, id := range ids {
		if i > 0 {
			items += ","
		}
		items += fmt.Sprintf(`{"id":%q,"task":"t","status":"queued","attempts":0,"result_ref":null,"error":null,"created_at":"2026-12-03T08:00:00Z","updated_at":"2026-12-03T08:00:00Z"}`, id)
	}
	body := `{"items":[` + items + `]`
	if next != "" {
		body += `,"next_cursor":"` + next + `"`
	}
	return reply{status: 200, header: map[string]string{"Content-Type": "application/json"}, body: body + "}"}
}

// AllJobs reads the pages one after the other, each after the cursor the
// one before it ended with, with the filter on every page, and stops
// reading when the loop stops.
func TestAllJobs(t *testing.T) {
	t.Parallel()
	g := newGateway(t, listReply("c1", "job_3", "job_2"), listReply("c2", "job_1"), listReply("", "job_0"))
	c := testClient(g, newClock())
	after := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for j, err := range c.AllJobs(t.Context(), JobFilter{Status: openapi.JobStatusQueued, Task: "invoice.create", CreatedAfter: after, Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.Id)
	}
	if want := []string{"job_3", "job_2", "job_1", "job_0"}; !slices.Equal(ids, want) {
		t.Errorf("AllJobs: %v, want %v", ids, want)
	}
	var paths []string
	for _, r := range g.requests() {
		paths = append(paths, r.method+" "+r.path)
	}
	const before, after2 = "GET /v1/jobs?created_after=2026-12-01T00%3A00%3A00Z", "limit=2&status=queued&task=invoice.create"
	if want := []string{before + "&" + after2, before + "&cursor=c1&" + after2, before + "&cursor=c2&" + after2}; !slices.Equal(paths, want) {
		t.Errorf("requests:\n%v\nwant\n%v", paths, want)
	}

	// Breaking out of the loop reads no further page.
	g = newGateway(t, listReply("c1", "job_3", "job_2"), listReply("", "job_1"))
	for range testClient(g, newClock()).AllJobs(t.Context(), JobFilter{}) {
		break
	}
	if n := len(g.requests()); n != 1 {
		t.Errorf("a loop that stops at the first job read %d pages, want 1", n)
	}
}

// A filter the gateway refuses ends the listing with the 400 problem.
func TestAllJobsRefused(t *testing.T) {
	t.Parallel()
	g := newGateway(t, problemReply(400, "bad-request", "the job list's parameters are not valid: limit", nil))
	var errs []error
	for _, err := range testClient(g, newClock()).AllJobs(t.Context(), JobFilter{Limit: 1000}) {
		errs = append(errs, err)
	}
	var p *ProblemError
	if len(errs) != 1 || !errors.As(errs[0], &p) || p.Status != 400 || len(g.requests()) != 1 {
		t.Fatalf("AllJobs: %v after %d requests, want one 400 at once", errs, len(g.requests()))
	}
}
