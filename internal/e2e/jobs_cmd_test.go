package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
)

const enqueueRoutes = `  - {name: invoices, methods: [POST], path: /v1/invoices, enqueue: {task: invoice.create, queue: %s}}
  - {name: inventory, methods: [POST], path: /v1/inventory/adjustments, enqueue: {task: inventory.adjust, queue: %s}}
  - {name: charges, methods: [POST], path: /v1/payments/charges, enqueue: {task: payment.charge, queue: %s}}
  - {name: notifications, methods: [POST], path: /v1/notifications, enqueue: {task: notification.send, queue: %s}}
worker:
  queues: {%s: 1}
`

type jobDoc struct {
	ID        string  `json:"id"`
	Task      string  `json:"task"`
	Status    string  `json:"status"`
	Attempts  int     `json:"attempts"`
	ResultRef *string `json:"result_ref"`
	Error     *string `json:"error"`
}

func decodeJob(t *testing.T, r resp) jobDoc {
	t.Helper()
	return decodeDoc[jobDoc](t, r)
}

// decodeDoc decodes a job document answer into D, the fields a test reads.
func decodeDoc[D any](t *testing.T, r resp) D {
	t.Helper()
	var d D
	if err := json.Unmarshal(r.body, &d); err != nil {
		t.Fatalf("job document %s: %v", r.body, err)
	}
	return d
}

func getJob(t *testing.T, base, id, apiKey string) resp {
	t.Helper()
	hr, _ := http.NewRequest(http.MethodGet, base+"/v1/jobs/"+id, nil)
	hr.Header.Set("Authorization", "Bearer "+apiKey)
	return roundTrip(t, client, hr)
}

// startEnqueueGateway starts a gateway with the example enqueue routes on
// a queue of its own, which it returns.
func startEnqueueGateway(t *testing.T, dbURL, redisURL string) (*gatewayProc, string) {
	t.Helper()
	up := newUpstream(t)
	queue := "q" + randomID()
	cfg := writeConfig(t, "postgres", dbURL, redisURL, up.srv.URL, strings.ReplaceAll(enqueueRoutes, "%s", queue))
	return startGateway(t, cfg), queue
}

func TestEnqueueRoutes(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	g, queue := startEnqueueGateway(t, dbURL, redisURL)
	run := randomID()

	body := `{"order_id":"o-` + run + `","amount_cents":4200,"currency":"EUR"}`
	first := send(t, g.public, req{path: "/v1/invoices", key: run + "-inv", body: body})
	if first.status != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", first.status, first.body)
	}
	job := decodeJob(t, first)
	if job.ID == "" || job.Task != "invoice.create" || job.Status != "queued" || first.header.Get("Location") != "/v1/jobs/"+job.ID {
		t.Fatalf("202: Location %q, job %+v", first.header.Get("Location"), job)
	}
	again := send(t, g.public, req{path: "/v1/invoices", key: run + "-inv", body: body})
	if again.status != 202 || again.header.Get("Idempotent-Replayed") != "true" || decodeJob(t, again).ID != job.ID {
		t.Fatalf("replay of an enqueue: %d replayed=%q %s", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}

	got := getJob(t, g.public, job.ID, "acme-key")
	if got.status != 200 || decodeJob(t, got).ID != job.ID {
		t.Fatalf("GET job: %d %s", got.status, got.body)
	}
	if r := getJob(t, g.public, job.ID, "globex-key"); r.status != 404 || r.problemType(t) != "not-found" {
		t.Fatalf("another tenant's GET: %d %s, want 404", r.status, r.body)
	}
	if r := getJob(t, g.public, "job_nope", "acme-key"); r.status != 404 {
		t.Fatalf("unknown job: %d", r.status)
	}
	if r := getJob(t, g.public, job.ID, "wrong"); r.status != 401 {
		t.Fatalf("GET job without valid credentials: %d", r.status)
	}

	for _, tc := range []struct {
		name, path, body string
		status           int
		slug             string
		fields           []string
	}{
		{"invalid field", "/v1/invoices", `{"order_id":"x","amount_cents":-5,"currency":"EUR"}`, 422, "invalid-payload", []string{"amount_cents"}},
		{"two violations", "/v1/invoices", `{"order_id":"x","amount_cents":"5","currency":"euro"}`, 422, "invalid-payload", []string{"amount_cents", "currency"}},
		{"missing field", "/v1/invoices", `{"amount_cents":5,"currency":"EUR"}`, 422, "invalid-payload", []string{"order_id"}},
		{"unknown field", "/v1/payments/charges", `{"payment_id":"p","amount_cents":5,"currency":"EUR","extra":true}`, 422, "invalid-payload", []string{"extra"}},
		{"not json", "/v1/notifications", `{"event_id":`, 400, "bad-request", []string{""}},
		{"zero delta", "/v1/inventory/adjustments", `{"adjustment_id":"a","sku":"s","delta":0}`, 422, "invalid-payload", []string{"delta"}},
	} {
		r := send(t, g.public, req{path: tc.path, key: run + strings.ReplaceAll(tc.name, " ", "-"), body: tc.body})
		if r.status != tc.status || r.problemType(t) != tc.slug {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
			continue
		}
		var p struct {
			Errors []struct{ Field string } `json:"errors"`
		}
		_ = json.Unmarshal(r.body, &p)
		var fields []string
		for _, e := range p.Errors {
			fields = append(fields, e.Field)
		}
		if !slices.Equal(fields, tc.fields) {
			t.Errorf("%s: errors %+v, want one per violation, naming %q", tc.name, p.Errors, tc.fields)
		}
	}
	// Nothing was recorded or queued for a refused body: one job, one task.
	pool := testkit.PoolAt(t, dbURL)
	if n := count(t, pool, `SELECT count(*) FROM jobs`); n != 1 {
		t.Errorf("%d job records, want 1: a refused payload was recorded", n)
	}
	inspector := inspectorFor(t, redisURL)
	t.Cleanup(func() { _ = inspector.DeleteQueue(queue, true) })
	if tasks, err := inspector.ListPendingTasks(queue); err != nil || len(tasks) != 1 {
		t.Errorf("pending tasks %d (%v), want 1: a refused payload was queued", len(tasks), err)
	}
	if r := send(t, g.public, req{path: "/v1/invoices", body: body}); r.status != 400 || r.problemType(t) != "idempotency-key-missing" {
		t.Fatalf("enqueue without a key: %d", r.status)
	}
}

// `idemgate jobs list` pages through the jobs an operator filters, as a
// table that prints the next page's flag or as the document GET
// /admin/jobs answers, which lists the same jobs; a tenant's GET /v1/jobs
// shows only its own.
func TestJobsList(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	up := newUpstream(t)
	queue := "q" + randomID()
	cfg := writeConfig(t, "postgres", dbURL, redisURL, up.srv.URL, strings.ReplaceAll(enqueueRoutes, "%s", queue))
	g := startGateway(t, cfg)
	run := randomID()
	var ids []string // newest first
	for i := range 3 {
		body := `{"order_id":"o-` + run + `-` + string(rune('a'+i)) + `","amount_cents":100,"currency":"EUR"}`
		r := send(t, g.public, req{path: "/v1/invoices", key: run + "-" + string(rune('a'+i)), body: body})
		if r.status != http.StatusAccepted {
			t.Fatalf("enqueue: %d %s", r.status, r.body)
		}
		ids = append([]string{decodeJob(t, r).ID}, ids...)
	}
	r := send(t, g.public, req{path: "/v1/invoices", key: run + "-g", apiKey: "globex-key",
		body: `{"order_id":"o-` + run + `-g","amount_cents":100,"currency":"EUR"}`})
	if r.status != http.StatusAccepted {
		t.Fatalf("globex's enqueue: %d %s", r.status, r.body)
	}

	code, out, errOut := cli(t, nil, "jobs", "list", "--tenant", "acme", "--limit", "2", "--config", cfg)
	if code != 0 {
		t.Fatalf("jobs list: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "JOB ID") || !strings.HasPrefix(lines[1], ids[0]) || !strings.HasPrefix(lines[2], ids[1]) ||
		!strings.Contains(lines[1], "acme") || !strings.Contains(lines[1], "invoice.create") || !strings.Contains(lines[1], "queued") {
		t.Fatalf("the first page of 2:\n%s", out)
	}
	_, cursor, ok := strings.Cut(lines[3], "the next page: --cursor ")
	if !ok {
		t.Fatalf("the first page names no next page:\n%s", out)
	}
	code, out, errOut = cli(t, nil, "jobs", "list", "--tenant", "acme", "--limit", "2", "--cursor", cursor, "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("jobs list --json: exit %d: %s", code, errOut)
	}
	var page struct {
		Items      []jobDoc `json:"items"`
		NextCursor *string  `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("jobs list --json: %v: %s", err, out)
	}
	if len(page.Items) != 1 || page.Items[0].ID != ids[2] || page.NextCursor != nil {
		t.Fatalf("the second page: %s, want %s alone and no next page", out, ids[2])
	}
	code, _, errOut = cli(t, nil, "jobs", "list", "--cursor", "nope", "--config", cfg)
	if code != 2 || !strings.Contains(errOut, "--cursor: not a cursor a list printed") {
		t.Errorf("a bad cursor: exit %d: %s", code, errOut)
	}

	// Through the gateway: the tenant's own jobs, newest first.
	hr, _ := http.NewRequest(http.MethodGet, g.public+"/v1/jobs?limit=10", nil)
	hr.Header.Set("Authorization", "Bearer acme-key")
	got := roundTrip(t, client, hr)
	var list struct {
		Items []jobDoc `json:"items"`
	}
	if got.status != http.StatusOK || json.Unmarshal(got.body, &list) != nil {
		t.Fatalf("GET /v1/jobs: %d %s", got.status, got.body)
	}
	var listed []string
	for _, j := range list.Items {
		listed = append(listed, j.ID)
	}
	if !slices.Equal(listed, ids) {
		t.Errorf("GET /v1/jobs: %v, want acme's %v", listed, ids)
	}
}
