package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// postForm confirms an action from the console as the Basic user user,
// with form as the confirmation form's fields.
func (v *env) postForm(t *testing.T, path, user string, form url.Values) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, v.admin.URL+path, strings.NewReader(form.Encode()))
	req.SetBasicAuth(user, adminToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", v.admin.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// TestActionsAreAccountable: a cancel from the console and one through
// the admin API each leave who, when, what and why in the audit trail,
// which the job's page shows on its timeline and explain tells, in text
// and JSON; each is counted in idemgate_admin_actions_total. A reason
// longer than the bound is refused and nothing is done.
func TestActionsAreAccountable(t *testing.T) {
	v := setup(t)
	ctx := t.Context()

	id := v.invoice(t, "acme", "audit-1", "o-audit-1")
	if doc := v.page(t, "/admin/ui/jobs/"+id+"/cancel"); byID(doc, "reason") == nil {
		t.Fatal("the confirmation page has no reason field")
	} else if got := text(byID(doc, "confirm")); got != "Cancel job" {
		t.Errorf("the confirmation's button reads %q, want %q", got, "Cancel job")
	} else if back := byID(doc, "back"); back == nil || byID(doc, "confirm-form") == nil || text(back) == "Cancel job" {
		t.Error("the confirmation page has no way back apart from the form")
	}
	// Too long a reason: refused, the job untouched.
	resp := v.postForm(t, "/admin/ui/jobs/"+id+"/cancel", "alice", url.Values{"reason": {strings.Repeat("x", job.MaxReasonBytes+1)}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("cancel with a reason too long: %d, want 400", resp.StatusCode)
	}
	if rec, _ := v.records.ByID(ctx, id); rec.Status == job.StatusCancelled {
		t.Fatal("a refused cancel cancelled the job")
	}
	resp = v.postForm(t, "/admin/ui/jobs/"+id+"/cancel", "alice", url.Values{"reason": {"customer <b>asked</b> on ticket 4411"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel from the console: %d, want 303", resp.StatusCode)
	}

	actions, err := v.records.ActionsOnJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 1 {
		t.Fatalf("actions on %s: %+v, want one", id, actions)
	}
	a := actions[0]
	if a.Actor != "alice" || a.Action != "cancel" || a.Via != "console" || a.Tenant != "acme" || a.Reason != "customer <b>asked</b> on ticket 4411" || a.At.IsZero() {
		t.Errorf("the console's cancel recorded %+v", a)
	}

	// The job's page shows it on the timeline, the reason as text.
	doc := v.page(t, "/admin/ui/jobs/"+id)
	entries := find(doc, func(n *html.Node) bool { return hasClass(n, "audit-entry") })
	if len(entries) != 1 {
		t.Fatalf("the job's page shows %d audit entries, want 1", len(entries))
	}
	if got := text(entries[0]); !strings.Contains(got, "cancel by alice via console") || !strings.Contains(got, "reason: customer <b>asked</b> on ticket 4411") {
		t.Errorf("the audit entry reads %q", got)
	}

	// Through the admin API, with a bearer token and a JSON reason, on a
	// second job: the actor is the token.
	id2 := v.invoice(t, "acme", "audit-2", "o-audit-2")
	req, _ := http.NewRequest(http.MethodPost, v.admin.URL+"/admin/jobs/"+id2+"/cancel", strings.NewReader(`{"reason":"duplicate order"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	apiResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = apiResp.Body.Close()
	if apiResp.StatusCode != http.StatusOK {
		t.Fatalf("admin cancel: %d", apiResp.StatusCode)
	}
	req, _ = http.NewRequest(http.MethodPost, v.admin.URL+"/admin/jobs/"+id2+"/cancel?reason="+url.QueryEscape(strings.Repeat("y", 1001)), nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if apiResp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	_ = apiResp.Body.Close()
	if apiResp.StatusCode != http.StatusBadRequest || !strings.Contains(apiResp.Header.Get("Content-Type"), "problem+json") {
		t.Errorf("admin cancel with a reason too long: %d %s, want a 400 problem", apiResp.StatusCode, apiResp.Header.Get("Content-Type"))
	}

	// explain tells both, text and JSON.
	x := &explain.Explainer{DB: v.pool, Keys: v.store}
	story, err := x.Job(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	if story.Actions == nil || len(*story.Actions) != 1 {
		t.Fatalf("explain's actions on %s: %v", id2, story.Actions)
	}
	if got := (*story.Actions)[0]; got.Actor != "admin token" || got.Action != "cancel" || got.Via != "api" || got.Reason != "duplicate order" {
		t.Errorf("explain's action: %+v", got)
	}
	var out bytes.Buffer
	if err := explain.WriteText(&out, story); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cancel by admin token via api") || !strings.Contains(out.String(), "reason: duplicate order") {
		t.Errorf("explain's text has no action line:\n%s", out.String())
	}
	b, _ := json.Marshal(story)
	if !strings.Contains(string(b), `"actions":[{"id":`) || !strings.Contains(string(b), `"actor":"admin token"`) {
		t.Errorf("explain's JSON: %s", b)
	}

	// Both counted once, by action.
	_, metrics := v.adminDo(t, http.MethodGet, "/metrics")
	if !strings.Contains(metrics, `idemgate_admin_actions_total{action="cancel"} 2`) {
		t.Errorf("metrics: no idemgate_admin_actions_total{action=\"cancel\"} 2 in\n%s", grepLines(metrics, "idemgate_admin_actions"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestBulkIsBounded: a bulk replay acts on at most MaxBulk jobs, the
// confirmation says so and how many remain, and the rest stay failed.
func TestBulkIsBounded(t *testing.T) {
	v := setupWith(t, func(o *console.Options) { o.MaxBulk = 5 })
	ctx := t.Context()
	var ids []string
	for i := range 7 {
		id := v.invoice(t, "acme", fmt.Sprintf("bounded-%d", i), fmt.Sprintf("o-bounded-%d", i))
		v.fail(t, id)
		ids = append(ids, id)
	}
	doc := v.page(t, "/admin/ui/failed/replay?task=invoice.create")
	count := byID(doc, "bulk-count")
	if got, _ := attr(count, "data-count"); got != "5" {
		t.Errorf("the confirmation acts on %s jobs, want 5", got)
	}
	if got, _ := attr(count, "data-remaining"); got != "2" {
		t.Errorf("the confirmation says %s remain, want 2", got)
	}
	if got := text(byID(doc, "confirm")); got != "Replay 5 jobs" {
		t.Errorf("the button reads %q", got)
	}
	resp := v.postForm(t, "/admin/ui/failed/replay?task=invoice.create", "bob", url.Values{})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "n=5") {
		t.Fatalf("bulk replay: %d Location %q", resp.StatusCode, loc)
	}
	queued, failed := 0, 0
	for _, id := range ids {
		rec, err := v.records.ByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Status {
		case job.StatusQueued:
			queued++
		case job.StatusFailed:
			failed++
		}
	}
	if queued != 5 || failed != 2 {
		t.Errorf("after a bulk replay bounded at 5: %d queued, %d failed; want 5 and 2", queued, failed)
	}
	var rows int
	if err := v.pool.QueryRow(ctx, `SELECT count(*) FROM admin_actions WHERE job_id = ANY($1) AND action = 'bulk-replay' AND actor = 'bob'`, ids).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 5 {
		t.Errorf("audit rows: %d, want 5", rows)
	}
}

// TestRunNow: a job backing off (its task in the retry set, due in an
// hour) is run at once from its page: its task becomes pending, and the
// action is in the audit trail. A job not backing off has no such action.
func TestRunNow(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	id := v.invoice(t, "acme", "backoff-1", "o-backoff-1")
	if doc := v.page(t, "/admin/ui/jobs/"+id); byID(doc, "action-run-now") != nil {
		t.Error("a queued job's page offers run now")
	}

	// A worker whose attempt fails and backs off for an hour.
	opt, err := asynq.ParseRedisURI(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := asynq.NewServer(opt, asynq.Config{
		Queues: map[string]int{v.queue: 1}, Concurrency: 1, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour },
	})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("partner busy") })); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := v.inspector.GetTaskInfo(v.queue, id)
		if err == nil && info.State == asynq.TaskStateRetry {
			break
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			t.Fatalf("the task never backed off: %v %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Shutdown()
	if err := v.records.SetStatus(ctx, id, job.StatusRetrying, 1, "", "partner busy"); err != nil {
		t.Fatal(err)
	}

	if doc := v.page(t, "/admin/ui/jobs/"+id); byID(doc, "action-run-now") == nil {
		t.Fatal("a retrying job's page offers no run now")
	}
	resp := v.postForm(t, "/admin/ui/jobs/"+id+"/run-now", "carol", url.Values{"reason": {"partner is back"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasSuffix(loc, "?done=run-now") {
		t.Fatalf("run now: %d Location %q", resp.StatusCode, loc)
	}
	if info, err := v.inspector.GetTaskInfo(v.queue, id); err != nil || info.State != asynq.TaskStatePending {
		t.Errorf("after run now the task is %v, %v; want pending", info, err)
	}
	actions, err := v.records.ActionsOnJob(ctx, id)
	if err != nil || len(actions) != 1 || actions[0].Action != "run-now" || actions[0].Actor != "carol" || actions[0].Reason != "partner is back" {
		t.Errorf("audit trail after run now: %+v, %v", actions, err)
	}
}
