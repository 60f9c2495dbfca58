package browsertest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBulkReplayInBrowser: 20 payments the partner refused for good are
// replayed at once from the failed-jobs page with a reason; each runs
// again through its record and is charged once, and the job's page shows
// the action, who did it and why, on its timeline.
func TestBulkReplayInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium, a gateway and a worker")
	}
	chromium(t) // skip before starting anything when it is missing
	s := newStack(t)
	g := s.start("gateway", "serve")
	s.console = g
	s.start("worker", "worker")
	run := randomID()

	const n = 20
	ids := make([]string, n)
	pays := make([]string, n)
	for i := range ids {
		pays[i] = fmt.Sprintf("%sbulk-%s-%d", deadPayment, run, i)
		ids[i] = s.submitPayment(g, pays[i])
	}
	waitUntil(t, "every payment failed", 2*time.Minute, func() bool {
		return s.count(`SELECT count(*) FROM jobs WHERE status = 'failed' AND id = ANY($1)`, ids) == n
	})

	b := newBrowser(t, g.admin())
	tb := b.newTab(true)
	tb.open(t, "/admin/ui/failed")
	tb.waitFor(t, "the group of 20 refused payments", 20*time.Second,
		`document.querySelector('tr.failed-group[data-task="payment.charge"][data-count="20"] a.group-link')`)
	tb.click(t, `tr.failed-group[data-task="payment.charge"] a.group-link`)
	tb.waitFor(t, "the group's jobs", 20*time.Second, `document.querySelectorAll("#failed-jobs tr.job").length === 20`)
	tb.click(t, "a#bulk-replay")
	tb.waitFor(t, "the bulk replay's confirmation", 20*time.Second, `document.querySelector("#bulk-count")`)
	if got := tb.text(t, "#bulk-count"); !strings.Contains(got, "20 jobs") {
		t.Errorf("the confirmation says %q, want it to state 20 jobs", got)
	}
	tb.typeInto(t, "textarea#reason", "card issuer fixed, INC-9")
	tb.click(t, "button#confirm")
	tb.waitFor(t, "the page after the bulk replay", 20*time.Second, `document.querySelector("#flash")`)
	if flash := tb.text(t, "#flash"); !strings.Contains(flash, "Replayed 20 failed jobs") {
		t.Fatalf("after the bulk replay: %q", flash)
	}
	waitUntil(t, "every replayed payment succeeded", 2*time.Minute, func() bool {
		return s.count(`SELECT count(*) FROM jobs WHERE status = 'succeeded' AND id = ANY($1)`, ids) == n
	})
	for _, p := range pays {
		if c := s.partner.charges(p); c != 1 {
			t.Errorf("the partner applied %s %d times, want 1", p, c)
		}
	}

	tb.open(t, "/admin/ui/jobs/"+ids[0])
	tb.waitFor(t, "the job's page", 20*time.Second, statusIs("succeeded"))
	entries := tb.items(t, "ol#audit li.audit-entry")
	if len(entries) != 1 {
		t.Fatalf("audit entries on the job's timeline: %v, want one", entries)
	}
	if got := tb.text(t, "ol#audit li.audit-entry"); !strings.Contains(got, "bulk-replay by operator via console") || !strings.Contains(got, "reason: card issuer fixed, INC-9") {
		t.Errorf("the audit entry reads %q", got)
	}
}
