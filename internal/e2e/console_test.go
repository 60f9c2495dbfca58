package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// TestConsoleServed: `idemgate serve` mounts the console on the admin
// listener behind the admin token, with the job a request just enqueued
// on its pages, and serves the queue UI under a Content-Security-Policy
// that keeps it on the listener's origin (no web fonts from elsewhere).
func TestConsoleServed(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	g, _ := startEnqueueGateway(t, dbURL, redisURL)
	run := randomID()
	if r := send(t, g.public, req{path: "/v1/invoices", key: run, body: `{"order_id":"o-` + run + `","amount_cents":100,"currency":"EUR"}`}); r.status != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}
	id := job.ID("acme", "invoices", run)
	if r := adminDo(t, g, "GET", "/admin/ui/", ""); r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("the console without the token: %d %q", r.status, r.header.Get("WWW-Authenticate"))
	}
	overview := adminDo(t, g, "GET", "/admin/ui/", adminToken)
	if overview.status != http.StatusOK || !strings.Contains(string(overview.body), "<h1>Overview</h1>") ||
		!strings.Contains(string(overview.body), `id="queues-link" href="/admin/queues"`) {
		t.Fatalf("GET /admin/ui/: %d %s", overview.status, overview.body)
	}
	page := adminDo(t, g, "GET", "/admin/ui/jobs/"+id, adminToken)
	if page.status != http.StatusOK || !strings.Contains(string(page.body), `id="job-status"`) || !strings.Contains(string(page.body), "o-"+run) {
		t.Fatalf("GET the job's page: %d %s", page.status, page.body)
	}
	queues := adminDo(t, g, "GET", "/admin/queues", adminToken)
	csp := queues.header.Get("Content-Security-Policy")
	if queues.status != http.StatusOK || !strings.Contains(csp, "font-src 'self'") || !strings.Contains(csp, "style-src 'self' 'unsafe-inline'") {
		t.Fatalf("GET /admin/queues: %d, Content-Security-Policy %q", queues.status, csp)
	}
}

// TestConsoleOff: admin.ui: false leaves /admin/ui out (404); the rest of
// the admin listener is unchanged.
func TestConsoleOff(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	up := newUpstream(t)
	queue := "q" + randomID()
	cfg := writeConfig(t, "postgres", dbURL, redisURL, up.srv.URL, strings.ReplaceAll(enqueueRoutes, "%s", queue)+"admin:\n  ui: false\n")
	g := startGateway(t, cfg)
	if r := adminDo(t, g, "GET", "/admin/ui/", adminToken); r.status != http.StatusNotFound {
		t.Fatalf("GET /admin/ui/ with admin.ui: false: %d, want 404", r.status)
	}
	if r := adminDo(t, g, "GET", "/admin/queues", adminToken); r.status != http.StatusOK {
		t.Fatalf("GET /admin/queues with admin.ui: false: %d, want 200", r.status)
	}
}
