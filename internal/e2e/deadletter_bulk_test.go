package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
)

// TestBulkReplay: 20 jobs that failed for good are replayed at once from
// the console's failed-jobs page, by their task: each runs again through
// its record and succeeds once (the stock they take is taken once each),
// and the action is in the audit trail under the operator's name, with
// the reason and the filter, on each job.
func TestBulkReplay(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	partner := httptest.NewServer(partnersim.New(partnersim.Options{}))
	t.Cleanup(partner.Close)
	queue := "bulk" + randomID()
	cfg := flowConfig(t, dbURL, redisURL, partner.URL, queue)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO inventory_items (tenant, sku, initial_stock, stock, fencing_token) VALUES ('acme', 'empty', 0, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	const n = 20
	ids := make([]string, n)
	for i := range ids {
		r := send(t, g.public, req{path: "/v1/inventory/adjustments", key: fmt.Sprintf("bulk-%s-%d", randomID(), i),
			body: fmt.Sprintf(`{"adjustment_id":"take-%d","sku":"empty","delta":-1}`, i)})
		if r.status != 202 {
			t.Fatalf("submit %d: %d %s", i, r.status, r.body)
		}
		ids[i] = decodeJob(t, r).ID
	}
	testkit.Eventually(t, "every job failed", 2*time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE status = 'failed' AND id = ANY($1)`, ids) == n
	})

	// The page groups them: one task, one error, 20 jobs.
	page := consoleDo(t, g, http.MethodGet, "/admin/ui/failed", nil)
	if page.status != 200 || !strings.Contains(string(page.body), `data-task="inventory.adjust" data-count="20"`) {
		t.Fatalf("failed page: %d, no group of 20 inventory.adjust jobs\n%s", page.status, page.body)
	}
	confirm := consoleDo(t, g, http.MethodGet, "/admin/ui/failed/replay?task=inventory.adjust", nil)
	if confirm.status != 200 || !strings.Contains(string(confirm.body), `data-count="20" data-remaining="0"`) {
		t.Fatalf("bulk replay confirmation: %d, does not state 20 jobs\n%s", confirm.status, confirm.body)
	}

	// Stock arrives; the operator replays them all.
	if _, err := pool.Exec(ctx, `UPDATE inventory_items SET initial_stock = 20, stock = 20 WHERE sku = 'empty'`); err != nil {
		t.Fatal(err)
	}
	done := consoleDo(t, g, http.MethodPost, "/admin/ui/failed/replay?task=inventory.adjust", url.Values{"reason": {"stock arrived, PO 77"}})
	if done.status != http.StatusSeeOther || !strings.Contains(done.header.Get("Location"), "done=bulk-replay&n=20") {
		t.Fatalf("bulk replay: %d Location %q\n%s", done.status, done.header.Get("Location"), done.body)
	}
	testkit.Eventually(t, "every replayed job succeeded", 2*time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE status = 'succeeded' AND id = ANY($1)`, ids) == n
	})
	if stock := count(t, pool, `SELECT stock FROM inventory_items WHERE sku = 'empty'`); stock != 0 {
		t.Errorf("stock after the replay: %d, want 0 (each job took one, once)", stock)
	}
	if got := count(t, pool, `SELECT count(*) FROM job_attempts WHERE job_id = ANY($1) AND outcome = 'succeeded'`, ids); got != n {
		t.Errorf("succeeded attempts: %d, want %d (one each)", got, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM admin_actions WHERE job_id = ANY($1) AND action = 'bulk-replay' AND actor = 'alice'
	   AND via = 'console' AND reason = 'stock arrived, PO 77' AND filter LIKE '%task=inventory.adjust%'`, ids); got != n {
		t.Errorf("audit rows of the bulk replay: %d, want %d", got, n)
	}
	if got := count(t, pool, `SELECT count(DISTINCT action_id) FROM admin_actions WHERE job_id = ANY($1)`, ids); got != 1 {
		t.Errorf("the bulk replay is %d actions, want 1", got)
	}
	// explain tells it on a job.
	if code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--job", ids[0]); code != 0 || !strings.Contains(out, "bulk-replay by alice via console") || !strings.Contains(out, "reason: stock arrived, PO 77") {
		t.Errorf("explain %s: exit %d, no action line\n%s%s", ids[0], code, out, errOut)
	}
}

// consoleDo sends a console request as the Basic user alice; a form, when
// not nil, is the POST's body.
func consoleDo(t *testing.T, g *gatewayProc, method, path string, form url.Values) resp {
	t.Helper()
	var hr *http.Request
	if form != nil {
		hr, _ = http.NewRequest(method, g.admin+path, strings.NewReader(form.Encode()))
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		hr, _ = http.NewRequest(method, g.admin+path, nil)
	}
	hr.SetBasicAuth("alice", adminToken)
	return roundTrip(t, noFollow, hr)
}

// noFollow shows a 303 instead of following it.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
