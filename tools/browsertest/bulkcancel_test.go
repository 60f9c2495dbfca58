package browsertest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBulkCancelAndRerunInBrowser: three queued payments are cancelled
// at once from the job list filtered by task, after a confirmation that
// counts them; one of them is then re-run as a new job from its page.
// Each page links to the other, and once a worker runs, the re-run is
// charged once and the cancelled payments never.
func TestBulkCancelAndRerunInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium, a gateway and a worker")
	}
	chromium(t)
	s := newStack(t)
	g := s.start("gateway", "serve")
	s.console = g
	run := randomID()

	const n = 3
	ids := make([]string, n)
	pays := make([]string, n)
	for i := range ids {
		pays[i] = fmt.Sprintf("pay-cancel-%s-%d", run, i)
		ids[i] = s.submitPayment(g, pays[i])
	}

	b := newBrowser(t, g.admin())
	tb := b.newTab(true)
	tb.open(t, "/admin/ui/jobs?task=payment.charge&status=queued")
	tb.waitFor(t, "the three queued payments", 20*time.Second, `document.querySelectorAll("#jobs tr.job").length === 3`)
	tb.click(t, "a#cancel-matching")
	tb.waitFor(t, "the cancel's confirmation", 20*time.Second, `document.querySelector("#bulk-count")`)
	if got := tb.text(t, "#bulk-count"); !strings.Contains(got, "3 jobs matching") || !strings.Contains(got, "task=payment.charge") {
		t.Errorf("the confirmation says %q, want 3 jobs and the filter", got)
	}
	tb.typeInto(t, "textarea#reason", "fraud ring, INC-12")
	tb.click(t, "button#confirm")
	tb.waitFor(t, "the list after the cancel", 20*time.Second, `document.querySelector("#flash")`)
	if flash := tb.text(t, "#flash"); !strings.Contains(flash, "Cancelled 3 jobs") {
		t.Fatalf("after the cancel: %q", flash)
	}
	if c := s.count(`SELECT count(*) FROM jobs WHERE status = 'cancelled' AND id = ANY($1)`, ids); c != n {
		t.Fatalf("%d of the payments are cancelled, want %d", c, n)
	}

	tb.open(t, "/admin/ui/jobs/"+ids[0])
	tb.waitFor(t, "the cancelled job's page", 20*time.Second, statusIs("cancelled"))
	if got := tb.text(t, "ol#audit li.audit-entry"); !strings.Contains(got, "bulk-cancel by operator via console") || !strings.Contains(got, "reason: fraud ring, INC-12") {
		t.Errorf("the cancel's audit entry reads %q", got)
	}
	tb.click(t, "a#action-rerun")
	tb.waitFor(t, "the re-run's confirmation", 20*time.Second, `document.querySelector("button#confirm")`)
	tb.typeInto(t, "textarea#reason", "customer cleared")
	tb.click(t, "button#confirm")
	tb.waitFor(t, "the new job's page", 20*time.Second, `document.querySelector("#rerun-of")`)
	if got := tb.text(t, "#rerun-of"); got != ids[0] {
		t.Errorf("the new job's page says it re-runs %q, want %s", got, ids[0])
	}
	newID := strings.TrimPrefix(strings.SplitN(tb.location(), "?", 2)[0], g.admin()+"/admin/ui/jobs/")
	if newID == ids[0] || !strings.HasPrefix(newID, "job_") {
		t.Fatalf("the re-run's page is at %q", tb.location())
	}
	tb.open(t, "/admin/ui/jobs/"+ids[0])
	tb.waitFor(t, "the old job's link to its re-run", 20*time.Second, `document.querySelector("#rerun-as")`)
	if got := tb.text(t, "#rerun-as"); got != newID {
		t.Errorf("the old job's page links to %q, want %s", got, newID)
	}

	s.start("worker", "worker")
	waitUntil(t, "the re-run succeeded", 2*time.Minute, func() bool {
		return s.count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'succeeded'`, newID) == 1
	})
	if c := s.partner.charges(pays[0]); c != 1 {
		t.Errorf("the partner charged the re-run payment %d times, want 1", c)
	}
	for _, p := range pays[1:] {
		if c := s.partner.charges(p); c != 0 {
			t.Errorf("the partner charged the cancelled payment %s %d times", p, c)
		}
	}
}
