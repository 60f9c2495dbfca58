package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
)

// TestBulkCancel: from the job list with its filters, "Cancel matching
// jobs" confirms how many jobs it cancels (at most MaxBulk, saying how
// many more match), cancels the newest through the single cancel, leaves
// other tenants' and finished jobs alone, and records one action with
// every job in the audit trail. POST /admin/jobs/cancel does the same
// through the admin API.
func TestBulkCancel(t *testing.T) {
	v := setupWith(t, func(o *console.Options) { o.MaxBulk = 3 })
	ctx := t.Context()
	var acme []string
	for i := range 4 {
		acme = append(acme, v.invoice(t, "acme", fmt.Sprintf("bulk-cancel-%d", i), fmt.Sprintf("o-bc-%d", i)))
	}
	other := v.invoice(t, "globex", "bulk-cancel-g", "o-bc-g")
	failed := v.invoice(t, "acme", "bulk-cancel-f", "o-bc-f")
	v.fail(t, failed)

	list := v.page(t, "/admin/ui/jobs?tenant=acme")
	link := byID(list, "cancel-matching")
	if link == nil {
		t.Fatal("the filtered job list offers no cancel of the matching jobs")
	}
	href, _ := attr(link, "href")
	if want := "/admin/ui/jobs/cancel?tenant=acme"; href != want {
		t.Errorf("cancel matching links to %q, want %q", href, want)
	}
	if doc := v.page(t, "/admin/ui/jobs?status=failed"); byID(doc, "cancel-matching") != nil {
		t.Error("the list of failed jobs offers to cancel them")
	}

	doc := v.page(t, href)
	count := byID(doc, "bulk-count")
	if got, _ := attr(count, "data-count"); got != "3" {
		t.Errorf("the confirmation acts on %s jobs, want 3 (the bound)", got)
	}
	if got, _ := attr(count, "data-remaining"); got != "1" {
		t.Errorf("the confirmation says %s more match, want 1", got)
	}
	if got := text(count); !strings.Contains(got, "at most 3 jobs are acted on at once") {
		t.Errorf("the confirmation does not state the bound: %q", got)
	}
	if got := text(byID(doc, "confirm")); got != "Cancel 3 jobs" {
		t.Errorf("the button reads %q", got)
	}
	if back, _ := attr(byID(doc, "back"), "href"); back != "/admin/ui/jobs?tenant=acme" {
		t.Errorf("back leads to %q", back)
	}

	resp := v.postForm(t, href, "dora", url.Values{"reason": {"tenant offboarded"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "done=bulk-cancel") || !strings.Contains(loc, "n=3") || !strings.Contains(loc, "tenant=acme") {
		t.Fatalf("bulk cancel: %d Location %q", resp.StatusCode, loc)
	}
	status := func(id string) job.Status {
		t.Helper()
		rec, err := v.records.ByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Status
	}
	// The newest three of acme's four queued jobs.
	for i, want := range []job.Status{job.StatusQueued, job.StatusCancelled, job.StatusCancelled, job.StatusCancelled} {
		if got := status(acme[i]); got != want {
			t.Errorf("acme's job %d is %s, want %s", i, got, want)
		}
	}
	if got := status(other); got != job.StatusQueued {
		t.Errorf("another tenant's job is %s", got)
	}
	if got := status(failed); got != job.StatusFailed {
		t.Errorf("a failed job is %s", got)
	}
	var actions, rows int
	if err := v.pool.QueryRow(ctx, `SELECT count(DISTINCT action_id), count(*) FROM admin_actions
 WHERE action = 'bulk-cancel' AND actor = 'dora' AND via = 'console' AND reason = 'tenant offboarded' AND filter = 'tenant=acme'`).Scan(&actions, &rows); err != nil {
		t.Fatal(err)
	}
	if actions != 1 || rows != 3 {
		t.Errorf("audit trail: %d actions over %d jobs, want one action over 3", actions, rows)
	}

	// The admin API cancels the rest, and says none is left.
	req, _ := http.NewRequest(http.MethodPost, v.admin.URL+"/admin/jobs/cancel?tenant=acme&status=queued", strings.NewReader(`{"reason":"the rest"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	apiResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out openapi.BulkCancel
	err = json.NewDecoder(apiResp.Body).Decode(&out)
	_ = apiResp.Body.Close()
	if err != nil || apiResp.StatusCode != http.StatusOK {
		t.Fatalf("POST /admin/jobs/cancel: %d, %v", apiResp.StatusCode, err)
	}
	if len(out.JobIds) != 1 || out.JobIds[0] != acme[0] || out.Cancelled != 1 || out.More {
		t.Errorf("POST /admin/jobs/cancel answered %+v, want %s cancelled and no more", out, acme[0])
	}
	if acts, err := v.records.ActionsOnJob(ctx, acme[0]); err != nil || len(acts) != 1 || acts[0].Action != "bulk-cancel" || acts[0].Via != "api" || acts[0].Reason != "the rest" {
		t.Errorf("the API's bulk cancel in the audit trail: %+v, %v", acts, err)
	}
	if got := status(other); got != job.StatusQueued {
		t.Errorf("another tenant's job is %s after the API's cancel", got)
	}

	// A parameter the cancel does not take is a 400 problem naming it.
	resp2, body := v.adminDo(t, http.MethodPost, "/admin/jobs/cancel?status=nope&limit=5")
	if resp2.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"field":"status"`) || !strings.Contains(body, `"field":"limit"`) {
		t.Errorf("a bad filter: %d %s", resp2.StatusCode, body)
	}
	// Nothing left to cancel: the console says so instead of confirming.
	if resp := v.postForm(t, "/admin/ui/jobs/cancel?tenant=acme&status=queued", "dora", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a cancel that matches nothing: %d", resp.StatusCode)
	}
	r3, _ := v.adminDo(t, http.MethodGet, "/admin/ui/jobs/cancel?tenant=acme&status=queued")
	if r3.StatusCode != http.StatusConflict {
		t.Errorf("confirming a cancel that matches nothing: %d, want 409", r3.StatusCode)
	}
}
