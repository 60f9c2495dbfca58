package console_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"golang.org/x/net/html"
)

// TestBatchPage: a batch's page counts its jobs by status and lists its
// items, each linking to its job; a job of the batch links to the batch.
func TestBatchPage(t *testing.T) {
	v := setup(t)
	client, _, queue := testkit.Queue(t, "console-batch")
	sub := job.NewSubmitter(v.pool, client)
	schema, err := os.ReadFile("testdata/invoice.create.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := job.NewSpec("invoice.create", schema, "invoice:{order_id}", "")
	if err != nil {
		t.Fatal(err)
	}
	b := job.Batch{Tenant: "acme", Route: "invoices:batch", Key: "batch-page", Items: 3}
	for i := range 3 {
		b.Requests = append(b.Requests, job.Request{Tenant: "acme", Route: "invoices", Key: fmt.Sprintf("bp-%d", i), Spec: spec, Queue: queue,
			Body: []byte(fmt.Sprintf(`{"order_id":"o-bp-%d","amount_cents":100,"currency":"EUR"}`, i))})
	}
	recs, err := sub.SubmitBatch(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.records.SetStatus(t.Context(), recs[1].ID, job.StatusFailed, 3, "", "partner refused"); err != nil {
		t.Fatal(err)
	}

	doc := v.page(t, "/admin/ui/batches/"+b.ID())
	counts := map[string]string{}
	for _, row := range find(byID(doc, "batch-counts"), func(n *html.Node) bool { return n.Data == "tr" && hasAttr(n, "data-status") }) {
		st, _ := attr(row, "data-status")
		counts[st] = text(row)
	}
	if len(counts) != 2 || counts["queued"] == "" || counts["failed"] == "" {
		t.Errorf("the batch's counts: %v, want queued and failed", counts)
	}
	rows := find(byID(doc, "jobs"), func(n *html.Node) bool { return hasClass(n, "job") })
	if len(rows) != 3 {
		t.Fatalf("the batch lists %d items, want 3", len(rows))
	}
	for i, row := range rows {
		if id, _ := attr(row, "data-id"); id != recs[i].ID {
			t.Errorf("item %d is %s, want %s", i, id, recs[i].ID)
		}
	}
	link := byID(v.page(t, "/admin/ui/jobs/"+recs[0].ID), "batch-link")
	if href, _ := attr(link, "href"); href != "/admin/ui/batches/"+b.ID() {
		t.Errorf("the job's batch link: %q", href)
	}
	if byID(v.page(t, "/admin/ui/jobs/"+v.invoice(t, "acme", "alone", "o-alone")), "batch-link") != nil {
		t.Error("a job submitted alone links to a batch")
	}
}

func hasAttr(n *html.Node, name string) bool { _, ok := attr(n, name); return ok }
