package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// explainDoc is the part of `explain --json` the tests read.
type explainDoc struct {
	Record *struct {
		State        string `json:"state"`
		Status       *int   `json:"status"`
		FencingToken int64  `json:"fencing_token"`
	} `json:"record"`
	Claims []struct {
		FencingToken int64  `json:"fencing_token"`
		Instance     string `json:"instance"`
		Outcome      string `json:"outcome"`
		Reason       string `json:"reason"`
	} `json:"claims"`
	ClaimLedger string `json:"claim_ledger"`
	Job         *struct {
		ID       string `json:"id"`
		Status   string `json:"status"`
		Attempts int    `json:"attempts"`
	} `json:"job"`
	Attempts []struct {
		Attempt      int     `json:"attempt"`
		FencingToken *int64  `json:"fencing_token"`
		Outcome      string  `json:"outcome"`
		StartedAt    string  `json:"started_at"`
		EndedAt      *string `json:"ended_at"`
		Error        string  `json:"error"`
	} `json:"attempts"`
	Effects []struct {
		Kind string `json:"kind"`
		Ref  string `json:"ref"`
	} `json:"effects"`
	Verdict   string `json:"verdict"`
	Violation bool   `json:"violation"`
}

// faultyPartner answers the first charge 503, the second 500, holds the
// third until its caller goes away (the worker is killed meanwhile), and
// hands every later one to sim.
type faultyPartner struct {
	sim  http.Handler
	hung chan struct{}
	stop chan struct{} // closed when the test ends

	mu    sync.Mutex
	calls int
}

func (p *faultyPartner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.mu.Unlock()
	switch n {
	case 1:
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	case 2:
		http.Error(w, "boom", http.StatusInternalServerError)
	case 3:
		close(p.hung)
		select {
		case <-r.Context().Done():
		case <-p.stop:
		}
	default:
		p.sim.ServeHTTP(w, r)
	}
}

// TestExplainJob: a payment retried through partner faults and a worker
// killed mid-attempt. explain --job lists every attempt with rising tokens,
// names the killed one crashed and the one that succeeded, and finds one
// effect; the text form says the same, and exit 0 says it is consistent.
func TestExplainJob(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for asynq to redeliver a killed worker's task")
	}
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	partner := &faultyPartner{sim: partnersim.New(partnersim.Options{}), hung: make(chan struct{}), stop: make(chan struct{})}
	srv := httptest.NewServer(partner)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(partner.stop) })
	cfg := flowConfig(t, dbURL, redisURL, srv.URL, "explain"+randomID())

	g := startGateway(t, cfg)
	doomed := startWorkerProcess(t, cfg)
	key := "pay-" + randomID()
	r := send(t, g.public, req{path: "/v1/payments/charges", key: key, body: `{"payment_id":"p-` + key + `","amount_cents":1250,"currency":"EUR"}`})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := job.ID("acme", "charges", key)
	select {
	case <-partner.hung:
	case <-time.After(2 * time.Minute):
		t.Fatal("the third charge never came")
	}
	if err := doomed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = doomed.Wait()
	startWorker(t, cfg)
	testkit.Eventually(t, "the payment succeeded", 4*time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE id = $1 AND status = 'succeeded'`, id) == 1
	})

	doc, out := explainJSON(t, cfg, "--job", id)
	if doc.Record == nil || doc.Record.State != "completed" || doc.Record.Status == nil || *doc.Record.Status != 202 {
		t.Errorf("record: %+v, want completed with 202", doc.Record)
	}
	if len(doc.Claims) != 1 || doc.Claims[0].FencingToken != doc.Record.FencingToken || doc.Claims[0].Outcome != "completed" {
		t.Errorf("claims: %+v, want the one completed claim", doc.Claims)
	}
	if doc.Job == nil || doc.Job.ID != id || doc.Job.Status != "succeeded" {
		t.Errorf("job: %+v", doc.Job)
	}
	var outcomes []string
	var last int64
	for _, a := range doc.Attempts {
		if a.Outcome == "lock_busy" {
			continue
		}
		outcomes = append(outcomes, a.Outcome)
		if a.FencingToken == nil || *a.FencingToken <= last {
			t.Errorf("attempt %+v: token does not rise above %d", a, last)
		} else {
			last = *a.FencingToken
		}
		if a.EndedAt == nil || a.StartedAt == "" {
			t.Errorf("attempt %+v has no start or end", a)
		}
	}
	if got := strings.Join(outcomes, ","); got != "unavailable,unavailable,crashed,succeeded" {
		t.Errorf("attempt outcomes %s, want unavailable,unavailable,crashed,succeeded\n%s", got, out)
	}
	if len(doc.Attempts) > 0 && !strings.Contains(doc.Attempts[0].Error, "503") {
		t.Errorf("the first attempt's error %q does not name the partner's 503", doc.Attempts[0].Error)
	}
	if len(doc.Effects) != 1 || doc.Effects[0].Kind != "payment" || !strings.HasPrefix(doc.Effects[0].Ref, "ch_") {
		t.Errorf("effects: %+v, want one payment with its charge", doc.Effects)
	}
	want := fmt.Sprintf("succeeded once at attempt 2 with token %d", last)
	if doc.Verdict != want || doc.Violation {
		t.Errorf("verdict %q (violation %v), want %q", doc.Verdict, doc.Violation, want)
	}

	code, text, errOut := cli(t, nil, "explain", "--config", cfg, "--job", id)
	if code != 0 {
		t.Fatalf("explain: exit %d\n%s%s", code, text, errOut)
	}
	order := []string{"record", "claims", "completed (202)", "job", "attempts", "crashed", "effects", "payment ch_", "verdict", want}
	at := 0
	for _, w := range order {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Fatalf("explain text lacks %q after byte %d:\n%s", w, at, text)
		}
		at += i
	}

	sameStory(t, g, "/admin/jobs/"+id+"/explain", doc)

	// The same story from the key.
	code, out, errOut = cli(t, nil, "explain", "--config", cfg, "--key", "acme", "charges", key, "--json")
	var byKey explainDoc
	if code != 0 || json.Unmarshal([]byte(out), &byKey) != nil || byKey.Job == nil || byKey.Job.ID != id || byKey.Verdict != want {
		t.Errorf("explain --key of the job's key: exit %d\n%s%s", code, out, errOut)
	}
}

// TestExplainViolation: an effect the job does not account for (a second
// invoice planted for the same business key is refused by the schema, so a
// failed job with an effect stands for it) exits 1 and says why.
func TestExplainViolation(t *testing.T) {
	dbURL := testkit.Postgres(t, exampleTables())
	pool := testkit.PoolAt(t, dbURL)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, last_error)
		 VALUES ('job_x', 'acme', 'invoices', 'k1', 'invoice.create', 'default', 'invoice:o-1', '{}', 'failed', 1, 'gave up')`,
		`INSERT INTO invoices (id, tenant, order_id, amount_cents, currency, job_key, fencing_token) VALUES ('inv_1', 'acme', 'o-1', 100, 'EUR', 'invoice:o-1', 1)`,
		`INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, updated_at)
		 VALUES ('job_y', 'acme', 'invoices', 'k2', 'invoice.create', 'default', 'invoice:o-2', '{}', 'queued', now() - interval '20 minutes')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg := writeConfig(t, "postgres", dbURL, "", "http://127.0.0.1:1", "")
	code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--job", "job_x")
	if code != 1 || !strings.Contains(out, "failed, but invoice inv_1 carries its business key") || !strings.Contains(errOut, "violation") {
		t.Errorf("a failed job with an effect: exit %d, want 1\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, nil, "explain", "--config", cfg, "--job", "job_y")
	if code != 1 || !strings.Contains(out, "stuck: queued for 20m") {
		t.Errorf("a job queued for 20 minutes: exit %d, want 1 and stuck\n%s%s", code, out, errOut)
	}
	code, _, errOut = cli(t, nil, "explain", "--config", cfg, "--job", "job_none")
	if code != 1 || !strings.Contains(errOut, "no job job_none") {
		t.Errorf("an unknown job: exit %d, want 1 naming it\n%s", code, errOut)
	}
}

// TestExplainKeyTakeOver: a proxied key whose gateway was killed mid-request
// and taken over by another after the lease. explain --key shows both
// claims, the dead gateway's taken over and the survivor's completed with
// a higher token; with store: redis it says there is no claim ledger.
func TestExplainKeyTakeOver(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a gateway process")
	}
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	up := newUpstream(t)
	cfg := writeConfig(t, "postgres", dbURL, redisURL, up.srv.URL, "")
	key := "killed-" + randomID()
	g, _ := killMidRequest(t, cfg, up, key)

	doc, _ := explainJSON(t, cfg, "--key", "acme", "slow", key)
	if doc.Record == nil || doc.Record.State != "completed" || doc.Job != nil {
		t.Fatalf("record %+v job %+v, want completed and no job", doc.Record, doc.Job)
	}
	if len(doc.Claims) != 2 ||
		doc.Claims[0].Outcome != "taken_over" ||
		doc.Claims[1].FencingToken != doc.Record.FencingToken || doc.Claims[1].Outcome != "completed" ||
		doc.Claims[1].FencingToken <= doc.Claims[0].FencingToken ||
		doc.Claims[0].Instance == "" || doc.Claims[0].Instance == doc.Claims[1].Instance {
		t.Errorf("claims %+v, want the dead gateway's taken over and the survivor's completed with a higher token", doc.Claims)
	}
	if want := fmt.Sprintf("completed once with token %d, status 201, after 2 claims", doc.Record.FencingToken); doc.Verdict != want || doc.Violation {
		t.Errorf("verdict %q", doc.Verdict)
	}
	sameStory(t, g, "/admin/keys/acme/slow/"+key+"/explain", doc)
	code, text, errOut := cli(t, nil, "explain", "--config", cfg, "--key", "acme", "slow", key)
	if code != 0 || !strings.Contains(text, "taken_over") || !strings.Contains(text, "completed (201)") {
		t.Errorf("explain --key text: exit %d\n%s%s", code, text, errOut)
	}

	// store: redis keeps no claim ledger, and says so.
	rcfg := writeConfig(t, "redis", dbURL, redisURL, up.srv.URL, "")
	rg := startGateway(t, rcfg)
	rkey := "redis-" + randomID()
	if r := send(t, rg.public, req{path: "/v1/payments", key: rkey}); r.status != 201 {
		t.Fatalf("redis store request: %d %s", r.status, r.body)
	}
	code, text, errOut = cli(t, nil, "explain", "--config", rcfg, "--key", "acme", "payments", rkey)
	if code != 0 || !strings.Contains(text, "store redis keeps no claim ledger") || !strings.Contains(text, "completed once with token") {
		t.Errorf("explain with store redis: exit %d\n%s%s", code, text, errOut)
	}
}

// explainJSON runs `idemgate explain` with args and --json, and returns
// the story and the output it was decoded from.
func explainJSON(t *testing.T, cfg string, args ...string) (explainDoc, string) {
	t.Helper()
	code, out, errOut := cli(t, nil, append(append([]string{"explain", "--config", cfg}, args...), "--json")...)
	if code != 0 {
		t.Fatalf("explain %s --json: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	var doc explainDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("explain --json is not JSON: %v\n%s", err, out)
	}
	return doc, out
}

// sameStory: the admin API at path tells the story `explain --json` told.
func sameStory(t *testing.T, g *gatewayProc, path string, want explainDoc) {
	t.Helper()
	r := adminDo(t, g, "GET", path, adminToken)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	var got explainDoc
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, r.body)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET %s tells another story than explain --json:\n%s", path, r.body)
	}
}
