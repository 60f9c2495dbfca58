package browsertest

import (
	"fmt"
	"net/url"
	"testing"
	"time"
)

// TestConsoleSearchInBrowser finds a job from the search box of the
// overview by each kind of id an operator is given (the job id, the
// request's idempotency key, the business key, a payload field), and
// keeps the keyboard focus where it was when the job's page updates
// itself.
func TestConsoleSearchInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium, gateways and workers")
	}
	chromium(t) // skip before starting anything when it is missing
	s := newStack(t)
	g := s.start("gateway", "serve")
	s.console = g
	run := randomID()

	// No worker yet: the payment waits, queued.
	pay := livePayment + "find-" + run
	id := s.submitPayment(g, pay)
	var businessKey string
	if err := s.pool.QueryRow(t.Context(), `SELECT business_key FROM jobs WHERE id = $1`, id).Scan(&businessKey); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, g.admin())
	tb := b.newTab(true)
	jobPath := "/admin/ui/jobs/" + url.PathEscape(id)
	for _, q := range []struct{ kind, text string }{
		{"job id", id},
		{"idempotency key", "key-" + pay},
		{"business key", businessKey},
		{"payload field", "payment_id=" + pay},
	} {
		t.Run(q.kind, func(t *testing.T) {
			tb.open(t, "/admin/ui/")
			tb.typeInto(t, "#search-q", q.text)
			tb.click(t, `form#search button[type="submit"]`)
			tb.waitFor(t, "the job found by its "+q.kind, 20*time.Second,
				fmt.Sprintf(`location.pathname === %s && document.querySelector("#job-status")`, jsString(jobPath)))
		})
	}

	t.Run("focus kept across a live update", func(t *testing.T) {
		tb.open(t, jobPath)
		tb.waitFor(t, "the queued job's page", 20*time.Second, statusIs("queued"))
		if got, err := eval[string](tb, `(document.querySelector("#action-cancel").focus(), document.activeElement.id)`); err != nil || got != "action-cancel" {
			t.Fatalf("focus the cancel link: %q %v", got, err)
		}
		// A worker takes the job: its first charge is answered 503, and
		// the page swaps its parts in.
		s.start("worker", "worker")
		tb.waitFor(t, "the page shows the job's new status", 90*time.Second, `!(`+statusIs("queued")+`)`)
		tb.waitFor(t, "the focus back on the cancel link", 5*time.Second, `document.activeElement && document.activeElement.id === "action-cancel"`)
	})
}
