package browsertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The console's pages for what runs beside single jobs: schedules, the
// fairness pools and batches. Each walk reads what an operator reads and
// follows the links an operator follows.

// schedulesWalk: the schedules page lists the configured schedule with
// its tenant and task; its link opens the schedule's own page.
func schedulesWalk(t *testing.T, tb *tab) {
	tb.open(t, "/admin/ui/schedules")
	tb.waitFor(t, "the schedules page", 20*time.Second, headingIs("Schedules"))
	row := `#schedules tr.schedule[data-tenant="` + tenant + `"][data-id="hourly-invoice"]`
	tb.waitFor(t, "the hourly schedule listed", 20*time.Second, `document.querySelector('`+row+`')`)
	if got := tb.text(t, row); !strings.Contains(got, "invoice.create") || !strings.Contains(got, "config") {
		t.Errorf("the schedule's row %q, want its task and source config", got)
	}
	tb.screenshot(t, "console-schedules")
	tb.click(t, row+" a.schedule-link")
	tb.waitFor(t, "the schedule's page", 20*time.Second,
		fmt.Sprintf(`location.pathname === %s && document.querySelector("h1") && document.querySelector("h1").textContent.includes("hourly-invoice")`,
			jsString("/admin/ui/schedules/"+tenant+"/hourly-invoice")))
	if got := tb.bodyText(); !strings.Contains(got, "invoice.create") {
		t.Errorf("the schedule's page does not name its task:\n%s", got)
	}
	tb.screenshot(t, "console-schedule")
}

// fairnessWalk: invoices of the tenant go through its pool; the fairness
// page links the pool, whose page shows the tenant with its weight and
// the share of the dispatches and the dwell the dispatcher measured.
func fairnessWalk(t *testing.T, s *stack, g *member, tb *tab, run string) {
	for i := range 6 {
		order := fmt.Sprintf("fair-%s-%d", run, i)
		a, err := post(t.Context(), g.public(), "/v1/invoices", "key-"+order, fmt.Sprintf(`{"order_id":%q,"amount_cents":100,"currency":"EUR"}`, order))
		if err != nil || a.status != http.StatusAccepted {
			t.Fatalf("submit invoice %s: %v %d %s", order, err, a.status, a.body)
		}
	}
	waitUntil(t, "the pooled invoices succeeded", 60*time.Second, func() bool {
		return s.count(`SELECT count(*) FROM jobs WHERE task = 'invoice.create' AND status = 'succeeded' AND business_key LIKE 'invoice:fair-%'`) >= 6
	})
	tb.open(t, "/admin/ui/fairness")
	tb.waitFor(t, "the fairness page", 20*time.Second, headingIs("Fairness"))
	tb.click(t, `#pools tr.pool[data-pool="tenants"] a.pool-link`)
	tb.waitFor(t, "the pool's page", 20*time.Second, `location.pathname === "/admin/ui/fairness/tenants"`)
	row := `#fair-tenants tr.fair-tenant[data-tenant="` + tenant + `"]`
	tb.waitFor(t, "the tenant's measured share", 20*time.Second, `(document.querySelector('`+row+` td.measured-share') || {}).textContent === "100%"`)
	if w := tb.text(t, row+" td.weight"); w != "3" {
		t.Errorf("the tenant's weight %q, want 3", w)
	}
	if d := tb.text(t, row+" td.dwell"); !strings.Contains(d, " / ≤ ") {
		t.Errorf("the tenant's dwell %q, want a mean and a p99 bound", d)
	}
	tb.screenshot(t, "console-pool")
	tb.open(t, "/admin/ui/fairness")
	tb.waitFor(t, "the fairness page again", 20*time.Second, `document.querySelector('#pools tr.pool[data-pool="tenants"]')`)
	tb.screenshot(t, "console-fairness")
}

// batchWalk: a batch of three invoices, submitted in one request, has a
// page that counts them and lists each one's job.
func batchWalk(t *testing.T, s *stack, g *member, tb *tab, run string) {
	var items []string
	for i := range 3 {
		items = append(items, fmt.Sprintf(`{"idempotency_key":"item-%s-%d","body":{"order_id":"batch-%s-%d","amount_cents":100,"currency":"EUR"}}`, run, i, run, i))
	}
	a, err := post(t.Context(), g.public(), "/v1/invoices:batch", "batch-"+run, `{"items":[`+strings.Join(items, ",")+`]}`)
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("submit the batch: %v %d %s", err, a.status, a.body)
	}
	var doc struct {
		BatchID string `json:"batch_id"`
	}
	if err := json.Unmarshal(a.body, &doc); err != nil || doc.BatchID == "" {
		t.Fatalf("the batch's answer names no batch: %v %s", err, a.body)
	}
	tb.open(t, "/admin/ui/batches/"+doc.BatchID)
	tb.waitFor(t, "the batch's page", 20*time.Second, fmt.Sprintf(`document.querySelector("h1") && document.querySelector("h1").textContent.includes(%s)`, jsString(doc.BatchID)))
	waitUntil(t, "the batch's invoices succeeded", 60*time.Second, func() bool {
		return s.count(`SELECT count(*) FROM jobs WHERE batch_id = $1 AND status = 'succeeded'`, doc.BatchID) == 3
	})
	tb.open(t, "/admin/ui/batches/"+doc.BatchID)
	tb.waitFor(t, "the batch's jobs listed succeeded", 20*time.Second, `document.querySelectorAll('#jobs tr.job[data-status="succeeded"]').length === 3`)
	if n := tb.text(t, `#batch-counts tr[data-status="succeeded"] td.count`); n != "3" {
		t.Errorf("the batch's succeeded count %q, want 3", n)
	}
	tb.click(t, `#jobs tr.job a.job-link`)
	tb.waitFor(t, "an item's job page", 20*time.Second, `location.pathname.startsWith("/admin/ui/jobs/") && document.querySelector("#job-status")`)
	tb.open(t, "/admin/ui/batches/"+doc.BatchID)
	tb.waitFor(t, "the batch's page again", 20*time.Second, `document.querySelectorAll('#jobs tr.job').length === 3`)
	tb.screenshot(t, "console-batch")
}

// headingIs is the predicate: the page's h1 says heading.
func headingIs(heading string) string {
	return fmt.Sprintf(`document.querySelector("h1") && document.querySelector("h1").textContent.trim() === %s`, jsString(heading))
}
