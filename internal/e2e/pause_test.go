package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
)

// adminSend sends body to the admin listener as operator user (HTTP
// Basic, the admin token as password).
func adminSend(t *testing.T, g *gatewayProc, method, path, user, body string) resp {
	t.Helper()
	hr, _ := http.NewRequest(method, g.admin+path, strings.NewReader(body))
	hr.SetBasicAuth(user, adminToken)
	hr.Header.Set("Content-Type", "application/json")
	return roundTrip(t, client, hr)
}

// countingReceiver answers every delivery with the status status()
// gives, and keeps when each came.
type countingReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	starts []time.Time
	status func() int
}

func newCountingReceiver(t *testing.T, status func() int) *countingReceiver {
	c := &countingReceiver{status: status}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.starts = append(c.starts, time.Now())
		c.mu.Unlock()
		w.WriteHeader(c.status())
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *countingReceiver) calls() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.starts...)
}

// pausedRows counts the jobs among ids with a paused row in their ledger,
// and the paused rows.
func pausedRows(t *testing.T, pool *pgxpool.Pool, ids []string) (jobs, rows int) {
	t.Helper()
	if err := pool.QueryRow(t.Context(), `SELECT count(DISTINCT job_id), count(*) FROM job_attempts WHERE job_id = ANY($1) AND outcome = 'paused'`, ids).Scan(&jobs, &rows); err != nil {
		t.Fatal(err)
	}
	return jobs, rows
}

func openPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestPauseEndToEnd pauses a task through the admin API, then submits
// jobs: the receiver gets nothing and the jobs lose nothing (each is sent
// back with a paused row, no attempt counted). Resumed from the CLI,
// each job runs exactly once.
func TestPauseEndToEnd(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	rcv := newCountingReceiver(t, func() int { return http.StatusOK })
	cfg := deliverConfig(t, dbURL, redisURL, rcv.srv.URL+"/hooks/shipments", "pause"+randomID())
	g := startGateway(t, cfg)
	pool := openPool(t, dbURL)

	r := adminSend(t, g, "POST", "/admin/pause", "alice", `{"task": "shipment.book", "reason": "partner outage"}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"by": "alice"`) {
		t.Fatalf("POST /admin/pause: %d %s", r.status, r.body)
	}
	startWorker(t, cfg)

	const n = 5
	var ids []string
	for i := range n {
		ids = append(ids, submitShipment(t, g, "pause-"+randomID(), `{"order_id": "p-`+randomID()+`", "quantity": 1}`))
		_ = i
	}
	// Every job comes to a worker and is sent back, twice at least.
	testkit.Eventually(t, "each job sent back twice by the pause", time.Minute, func() bool {
		jobs, rows := pausedRows(t, pool, ids)
		return jobs == n && rows >= 2*n
	})
	if got := len(rcv.calls()); got != 0 {
		t.Fatalf("the receiver got %d deliveries of a paused task, want 0", got)
	}
	for _, id := range ids {
		j := decodeJob(t, getJob(t, g.public, id, "acme-key"))
		if j.Attempts != 0 || j.Status == "failed" {
			t.Errorf("job %s while paused: %s with %d attempts, want no attempt counted", id, j.Status, j.Attempts)
		}
	}
	if r := adminDo(t, g, "GET", "/admin/pauses", adminToken); r.status != 200 || !strings.Contains(string(r.body), `"task": "shipment.book"`) {
		t.Errorf("GET /admin/pauses: %d %s", r.status, r.body)
	}
	code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--job", ids[0])
	if code != 0 || !strings.Contains(out, "paused by task pause since") || !strings.Contains(out, "by alice: partner outage") {
		t.Errorf("explain of a paused job: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = cli(t, nil, "resume", "--task", "shipment.book", "--by", "bob", "--reason", "partner back", "--config", cfg)
	if code != 0 || !strings.Contains(out, "resumed task shipment.book") {
		t.Fatalf("resume: exit %d %s%s", code, out, errOut)
	}
	for _, id := range ids {
		var j jobDoc
		testkit.Eventually(t, "job "+id+" succeeded after the resume", time.Minute, func() bool {
			j = decodeJob(t, getJob(t, g.public, id, "acme-key"))
			return j.Status == "succeeded"
		})
		if j.Attempts != 1 {
			t.Errorf("job %s: %d attempts, want 1: the paused deliveries are not attempts", id, j.Attempts)
		}
	}
	if got := len(rcv.calls()); got != n {
		t.Errorf("the receiver got %d deliveries, want %d: each job once", got, n)
	}
	var actions []string
	rows, err := pool.Query(t.Context(), `SELECT actor || ' ' || action || ' ' || via || ' ' || filter || ': ' || reason FROM admin_actions WHERE action IN ('pause', 'resume') AND filter = 'task shipment.book' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		actions = append(actions, s)
	}
	rows.Close()
	want := []string{"alice pause api task shipment.book: partner outage", "bob resume cli task shipment.book: partner back"}
	if strings.Join(actions, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit trail:\n%s\nwant:\n%s", strings.Join(actions, "\n"), strings.Join(want, "\n"))
	}
}

// TestPauseUntil pauses a queue from the CLI for a few seconds: its jobs
// are sent back meanwhile and run once by themselves when it ends.
func TestPauseUntil(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	rcv := newCountingReceiver(t, func() int { return http.StatusOK })
	queue := "until" + randomID()
	cfg := deliverConfig(t, dbURL, redisURL, rcv.srv.URL+"/hooks/shipments", queue)
	g := startGateway(t, cfg)
	pool := openPool(t, dbURL)

	code, out, errOut := cli(t, nil, "pause", "--queue", queue, "--until", "4s", "--config", cfg)
	if code != 0 || !strings.Contains(out, "paused queue "+queue+" until ") {
		t.Fatalf("pause --until: exit %d %s%s", code, out, errOut)
	}
	startWorker(t, cfg)
	ids := []string{
		submitShipment(t, g, "until-1-"+randomID(), `{"order_id": "u-`+randomID()+`", "quantity": 1}`),
		submitShipment(t, g, "until-2-"+randomID(), `{"order_id": "u-`+randomID()+`", "quantity": 1}`),
	}
	for _, id := range ids {
		var j jobDoc
		testkit.Eventually(t, "job "+id+" succeeded once the pause ended", time.Minute, func() bool {
			j = decodeJob(t, getJob(t, g.public, id, "acme-key"))
			return j.Status == "succeeded"
		})
		if j.Attempts != 1 {
			t.Errorf("job %s: %d attempts, want 1", id, j.Attempts)
		}
	}
	if jobs, _ := pausedRows(t, pool, ids); jobs != len(ids) {
		t.Errorf("%d of %d jobs were sent back by the pause; want each", jobs, len(ids))
	}
	if got := len(rcv.calls()); got != len(ids) {
		t.Errorf("the receiver got %d deliveries, want %d", got, len(ids))
	}
	if r := adminDo(t, g, "GET", "/admin/pauses", adminToken); r.status != 200 || strings.Contains(string(r.body), queue) {
		t.Errorf("GET /admin/pauses after the pause ended: %d %s", r.status, r.body)
	}
}

// TestPauseBreaker declares a limit whose breaker opens after 5
// consecutive failures within 10s, for 3s: a receiver that fails opens
// it, no delivery reaches the receiver while it is open, and it closes by
// itself, after which the jobs succeed.
func TestPauseBreaker(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	var (
		mu      sync.Mutex
		failing = true
	)
	rcv := newCountingReceiver(t, func() int {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	name := "ship-" + randomID()
	path := deliverConfig(t, dbURL, redisURL, rcv.srv.URL+"/hooks/shipments", "brk"+randomID())
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(b), "    max_attempts: 5\n", "    max_attempts: 20\n    limits: [{use: "+name+", key: \"{tenant}\"}]\n", 1)
	doc += "limits:\n  - {name: " + name + ", concurrency: 10, pause_after: {consecutive_failures: 5, within: 10s, for: 3s}}\n"
	cfg := writeFile(t, "breaker.yaml", doc)
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	pool := openPool(t, dbURL)

	var ids []string
	for range 5 {
		ids = append(ids, submitShipment(t, g, "brk-"+randomID(), `{"order_id": "b-`+randomID()+`", "quantity": 1}`))
	}
	type pauseDoc struct {
		Target struct {
			Limit *struct{ Name, Key string }
		}
		Since, Until time.Time
		By, Reason   string
		Story        string
	}
	var open pauseDoc
	testkit.Eventually(t, "the breaker opened", time.Minute, func() bool {
		r := adminDo(t, g, "GET", "/admin/limits/"+name, adminToken)
		var lim struct{ Paused []pauseDoc }
		if r.status != 200 || json.Unmarshal(r.body, &lim) != nil || len(lim.Paused) == 0 {
			return false
		}
		open = lim.Paused[0]
		return true
	})
	failuresAtOpen := len(rcv.calls())
	if open.By != "breaker" || open.Target.Limit == nil || open.Target.Limit.Key != "acme" ||
		open.Reason != "5 consecutive failures within 10s" || open.Until.Sub(open.Since).Round(time.Second) != 3*time.Second {
		t.Errorf("the breaker's pause: %+v", open)
	}
	if failuresAtOpen < 5 {
		t.Errorf("the breaker opened after %d deliveries, want 5 failures first", failuresAtOpen)
	}
	mu.Lock()
	failing = false
	mu.Unlock()
	// The breaker closes by itself: the jobs succeed.
	for _, id := range ids {
		testkit.Eventually(t, "job "+id+" succeeded after the breaker closed", time.Minute, func() bool {
			return decodeJob(t, getJob(t, g.public, id, "acme-key")).Status == "succeeded"
		})
	}
	calls := rcv.calls()
	var during, firstAfter int
	var closedAt time.Time
	for i, at := range calls {
		// A second after the opening, every worker has heard of it; an
		// attempt that started before may still be in flight.
		if at.After(open.Since.Add(time.Second)) && at.Before(open.Until) {
			during++
		}
		if at.After(open.Until) && closedAt.IsZero() {
			firstAfter, closedAt = i, at
		}
	}
	if during != 0 {
		t.Errorf("%d deliveries started while the breaker was open", during)
	}
	if closedAt.IsZero() {
		t.Fatalf("no delivery after the breaker's end %s", open.Until)
	}
	t.Logf("breaker timeline: first failure %s; opened %s after %d failures (%s); closed %s; first delivery after it %s (call %d); all %d jobs succeeded by %s",
		calls[0].UTC().Format(time.RFC3339Nano), open.Since.UTC().Format(time.RFC3339Nano), failuresAtOpen, open.Reason,
		open.Until.UTC().Format(time.RFC3339Nano), closedAt.UTC().Format(time.RFC3339Nano), firstAfter+1, len(ids),
		calls[len(calls)-1].UTC().Format(time.RFC3339Nano))
	var bounced int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM job_attempts WHERE job_id = ANY($1) AND outcome = 'paused' AND error LIKE 'paused by limit pause%by breaker: 5 consecutive failures within 10s'`, ids).Scan(&bounced); err != nil {
		t.Fatal(err)
	}
	if bounced == 0 {
		t.Errorf("no delivery was sent back by the breaker's pause")
	}
	if n := count(t, pool, `SELECT count(*) FROM admin_actions WHERE actor = 'breaker' AND action = 'pause' AND filter = $1`, `limit `+name+` key "acme"`); n != 1 {
		t.Errorf("%d audit rows of the breaker's opening, want 1", n)
	}
}

// TestPauseAdminRefusals sends the admin API what it refuses.
func TestPauseAdminRefusals(t *testing.T) {
	t.Parallel()
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	cfg := deliverConfig(t, dbURL, redisURL, "http://127.0.0.1:1/hooks", "ref"+randomID())
	g := startGateway(t, cfg)
	for _, tc := range []struct {
		name, path, body string
		status           int
		detail           string
	}{
		{"no target", "/admin/pause", `{}`, 400, "name exactly one target"},
		{"two targets", "/admin/pause", `{"task": "shipment.book", "queue": "q"}`, 400, "name exactly one target"},
		{"not JSON", "/admin/pause", `pause it`, 400, "the body of /admin/pause"},
		{"an unknown field", "/admin/pause", `{"task": "shipment.book", "for": "1m"}`, 400, "unknown field"},
		{"an unknown task", "/admin/pause", `{"task": "nope"}`, 404, `no task called \"nope\" is declared (declared: shipment.book)`},
		{"an unknown limit", "/admin/pause", `{"limit": {"name": "nope", "key": "acme"}}`, 404, `no limit called \"nope\" is declared`},
		{"an empty limit name", "/admin/pause", `{"limit": {"name": ""}}`, 400, "the limit's name is empty"},
		{"until in the past", "/admin/pause", `{"task": "shipment.book", "until": "2001-01-01T00:00:00Z"}`, 400, "is not in the future"},
		{"until unreadable", "/admin/pause", `{"task": "shipment.book", "until": "soon"}`, 400, "neither an RFC 3339 time"},
		{"a ramp on a pause", "/admin/pause", `{"task": "shipment.book", "ramp": "10%/1m"}`, 400, "ramp is for a resume"},
		{"until on a resume", "/admin/resume", `{"task": "shipment.book", "until": "1m"}`, 400, "until is for a pause"},
		{"a bad ramp", "/admin/resume", `{"task": "shipment.book", "ramp": "200%/1m"}`, 400, "is not P%/duration"},
		{"not paused", "/admin/resume", `{"task": "shipment.book"}`, 404, "the task shipment.book is not paused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := adminSend(t, g, "POST", tc.path, "alice", tc.body)
			if r.status != tc.status || !strings.Contains(r.header.Get("Content-Type"), "application/problem+json") ||
				!strings.Contains(string(r.body), tc.detail) {
				t.Errorf("POST %s %s: %d %s; want %d with %q", tc.path, tc.body, r.status, r.body, tc.status, tc.detail)
			}
		})
	}
	t.Run("a ramp", func(t *testing.T) {
		if r := adminSend(t, g, "POST", "/admin/pause", "alice", `{"task": "shipment.book", "until": "1h"}`); r.status != 200 {
			t.Fatalf("pause: %d %s", r.status, r.body)
		}
		r := adminSend(t, g, "POST", "/admin/resume", "alice", `{"task": "shipment.book", "ramp": "25%/1m"}`)
		if r.status != 200 || !strings.Contains(string(r.body), `"ramp": "25%/1m"`) || !strings.Contains(string(r.body), `"resumed_at"`) {
			t.Fatalf("resume with a ramp: %d %s", r.status, r.body)
		}
		// A ramping pause is still in force until its ramp ends (3m).
		if r := adminDo(t, g, "GET", "/admin/pauses", adminToken); !strings.Contains(string(r.body), "resuming at 25%/1m") {
			t.Errorf("GET /admin/pauses while ramping: %d %s", r.status, r.body)
		}
		if r := adminSend(t, g, "POST", "/admin/resume", "alice", `{"task": "shipment.book"}`); r.status != 200 {
			t.Errorf("resume at once while ramping: %d %s", r.status, r.body)
		}
	})
}

// TestPauseCLIFlags checks the command lines pause and resume refuse,
// with exit code 2.
func TestPauseCLIFlags(t *testing.T) {
	t.Parallel()
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	cfg := deliverConfig(t, dbURL, redisURL, "http://127.0.0.1:1/hooks", "flags"+randomID())
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no target", []string{"pause", "--config", cfg}, "pause: name exactly one of --task, --queue and --limit"},
		{"two targets", []string{"pause", "--task", "a", "--queue", "b", "--config", cfg}, "pause: name exactly one of --task, --queue and --limit"},
		{"a key without a limit", []string{"resume", "--task", "a", "--key", "k", "--config", cfg}, "resume: --key goes with --limit"},
		{"an empty name", []string{"pause", "--task", "", "--config", cfg}, "pause: the task's name is empty"},
		{"a bad until", []string{"pause", "--task", "shipment.book", "--until", "tomorrow", "--config", cfg}, "pause: --until: until \"tomorrow\" is neither"},
		{"a bad ramp", []string{"resume", "--task", "shipment.book", "--ramp", "0%/1m", "--config", cfg}, "resume: --ramp: ramp \"0%/1m\" is not P%/duration"},
		{"an argument", []string{"pause", "shipment.book", "--config", cfg}, "pause: takes no arguments"},
		{"an unknown task", []string{"pause", "--task", "nope", "--config", cfg}, `pause: no task called "nope" is declared (declared: shipment.book)`},
		{"an unknown limit", []string{"resume", "--limit", "nope", "--key", "acme", "--config", cfg}, `resume: no limit called "nope" is declared, and none is`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := cli(t, nil, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("idemgate %s: exit %d, %q; want 2 with %q", strings.Join(tc.args, " "), code, errOut, tc.want)
			}
		})
	}
	if code, _, errOut := cli(t, nil, "resume", "--task", "shipment.book", "--config", cfg); code != 1 || !strings.Contains(errOut, "the task shipment.book is not paused") {
		t.Errorf("resume of a task not paused: exit %d %q", code, errOut)
	}
}
