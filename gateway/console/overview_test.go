package console_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/reconcile"
)

// The overview counts each status up to 10,000 and says "10,000+" past
// it, rather than reading a table of millions.
func TestOverviewCapsItsCounts(t *testing.T) {
	v := setup(t)
	if _, err := v.pool.Exec(t.Context(), `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, finished_at)
SELECT 'job_cap' || i, 'acme', 'invoices', 'cap-' || i, 'invoice.create', 'default', 'invoice:cap-' || i, '{}', 'succeeded', 1, now()
  FROM generate_series(1, 10001) i`); err != nil {
		t.Fatal(err)
	}
	v.invoice(t, "acme", "inv-cap", "o-cap")
	doc := v.page(t, "/admin/ui/")
	shown := map[string]string{}
	for _, row := range find(byID(doc, "jobs-by-status"), func(n *html.Node) bool { _, ok := attr(n, "data-status"); return ok }) {
		st, _ := attr(row, "data-status")
		shown[st] = text(find(row, func(n *html.Node) bool { return hasClass(n, "count") })[0])
	}
	if shown["succeeded"] != "10,000+" || shown["queued"] != "1" || shown["failed"] != "0" {
		t.Errorf("jobs by status %v, want succeeded 10,000+, queued 1, failed 0", shown)
	}
}

// With PostgreSQL unreachable the overview still answers: it shows the
// requests this instance counted and says the job counts could not be
// read, instead of a 503 page.
func TestOverviewWithoutPostgreSQL(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := memstore.New()
	requests := gateway.NewRecentRequests(time.Now)
	h, err := console.New(console.Options{
		Stories: &explain.Explainer{DB: pool}, Keys: store, StoreName: "memory", Requests: requests,
		Jobs:   job.NewStore(pool),
		Stuck:  console.StuckJobs(pool, reconcile.Options{StuckAfter: explain.DefaultStuckAfter}),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + console.DefaultPrefix + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	doc, err := html.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("overview without PostgreSQL: %d, want 200 with what it can show", resp.StatusCode)
	}
	if byID(doc, "requests") == nil {
		t.Error("the overview without PostgreSQL lost its requests table")
	}
	if u := text(byID(doc, "unreadable")); !strings.Contains(u, "PostgreSQL could not be read") {
		t.Errorf("#unreadable = %q, want it to say PostgreSQL could not be read", u)
	}
	if byID(doc, "jobs-by-status") != nil {
		t.Error("the overview shows job counts it could not read")
	}
}
