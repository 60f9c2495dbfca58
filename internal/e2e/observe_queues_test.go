package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
)

// TestQueuesUI: asynqmon answers at /admin/queues on the admin listener
// with the admin token (as a bearer token, or as a browser's Basic
// password) and refuses without it; its API lists the queue a job was
// just enqueued on. It is read-only: its actions act on the queue alone,
// past the job records, and are refused.
func TestQueuesUI(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	g, queue := startEnqueueGateway(t, dbURL, redisURL)
	run := randomID()
	if r := send(t, g.public, req{path: "/v1/invoices", key: run, body: `{"order_id":"o-` + run + `","amount_cents":100,"currency":"EUR"}`}); r.status != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}

	page := adminDo(t, g, "GET", "/admin/queues", adminToken)
	if page.status != 200 || !strings.Contains(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /admin/queues with the token: %d %s", page.status, page.header.Get("Content-Type"))
	}
	refused := adminDo(t, g, "GET", "/admin/queues", "")
	if refused.status != 401 || !strings.HasPrefix(refused.header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("GET /admin/queues without the token: %d, WWW-Authenticate %q; want 401 and a Basic challenge", refused.status, refused.header.Get("WWW-Authenticate"))
	}
	if r := adminDo(t, g, "GET", "/admin/queues/api/queues", "not-the-token"); r.status != 401 {
		t.Fatalf("asynqmon API with a wrong token: %d, want 401", r.status)
	}

	// A browser sends the token as the Basic password.
	hr, _ := http.NewRequest("GET", g.admin+"/admin/queues/api/queues", nil)
	hr.SetBasicAuth("operator", adminToken)
	basic := roundTrip(t, client, hr)
	body := basic.body
	if basic.status != 200 {
		t.Fatalf("asynqmon API with Basic credentials: %d %s", basic.status, body)
	}
	var list struct {
		Queues []struct {
			Queue string `json:"queue"`
			Size  int    `json:"size"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("asynqmon queues: %v: %s", err, body)
	}
	found := false
	for _, q := range list.Queues {
		found = found || q.Queue == queue
	}
	if !found {
		t.Fatalf("asynqmon lists %+v, not the queue %q the job went to", list.Queues, queue)
	}

	// Its actions are refused: a task run from there would leave its
	// job's record behind (a failed job's task re-run left it failed).
	for _, action := range []string{"/archived_tasks:run_all", "/pending_tasks:archive_all", ":pause"} {
		hr, _ := http.NewRequest("POST", g.admin+"/admin/queues/api/queues/"+queue+action, nil)
		hr.SetBasicAuth("operator", adminToken)
		if r := roundTrip(t, client, hr); r.status != http.StatusMethodNotAllowed {
			t.Errorf("asynqmon POST %s: %d %s, want 405 (read-only)", action, r.status, r.body)
		}
	}
}
