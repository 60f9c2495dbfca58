package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/topology"
	"github.com/idemgate/idemgate/job"
)

// flowConfig is a gateway with the four enqueue routes and workers that
// call sim.
func flowConfig(t *testing.T, dbURL, redisURL, partnerURL, queue string) string {
	t.Helper()
	cfg := configHead("postgres", dbURL, redisURL) + fmt.Sprintf(`tenants:
  - name: acme
    api_key_sha256: [%q]
routes:
  - {name: invoices, methods: [POST], path: /v1/invoices, enqueue: {task: invoice.create, queue: %[2]s}}
  - {name: inventory, methods: [POST], path: /v1/inventory/adjustments, enqueue: {task: inventory.adjust, queue: %[2]s}}
  - {name: charges, methods: [POST], path: /v1/payments/charges, enqueue: {task: payment.charge, queue: %[2]s}}
  - {name: notifications, methods: [POST], path: /v1/notifications, enqueue: {task: notification.send, queue: %[2]s}}
worker:
  admin_listen: "127.0.0.1:0"
  concurrency: 8
  queues: {%[2]s: 1}
  lock_ttl: 5s
  max_attempts: 25
  partner_url: %[3]q
  shutdown_timeout: 10s
`, sha("acme-key"), queue, partnerURL)
	return writeFile(t, "flow.yaml", cfg)
}

// appendConfig adds top-level keys to the configuration file at path.
func appendConfig(t *testing.T, path, keys string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(keys); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// startWorker runs `idemgate worker` in this process.
func startWorker(t *testing.T, cfgPath string) func() error {
	t.Helper()
	p := runInProcess("worker", "--config", cfgPath)
	testkit.Eventually(t, "worker listening", 30*time.Second, func() bool { return addrs(p.out.String())["worker-admin"] != "" })
	t.Cleanup(func() {
		_ = p.stop()
		if t.Failed() {
			t.Logf("worker log (last 4000 bytes):\n%s", tail(p.errOut.String(), 4000))
		}
	})
	return p.stop
}

// startWorkerProcess runs `idemgate worker` as a child process to kill.
func startWorkerProcess(t *testing.T, cfgPath string) *exec.Cmd {
	t.Helper()
	cmd := childCommand("worker", "--config", cfgPath)
	out := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testkit.Eventually(t, "child worker listening", 60*time.Second, func() bool { return addrs(out.String())["worker-admin"] != "" })
	return cmd
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

type submission struct {
	route, path, key, body string
}

// exampleSubmissions are n jobs of each of the four example kinds, their
// keys and ids unique to run. The i-th inventory adjustment changes the
// stock of skus[i%len(skus)] by delta(i).
func exampleSubmissions(run string, n int, skus []string, delta func(i int) int) []submission {
	var subs []submission
	for i := range n {
		id := fmt.Sprintf("%s-%d", run, i)
		subs = append(subs,
			submission{"invoices", "/v1/invoices", "inv-" + id, fmt.Sprintf(`{"order_id":"o-%s","amount_cents":%d,"currency":"EUR"}`, id, 100+i)},
			submission{"inventory", "/v1/inventory/adjustments", "adj-" + id, fmt.Sprintf(`{"adjustment_id":"a-%s","sku":%q,"delta":%d}`, id, skus[i%len(skus)], delta(i))},
			submission{"charges", "/v1/payments/charges", "pay-" + id, fmt.Sprintf(`{"payment_id":"p-%s","amount_cents":%d,"currency":"EUR"}`, id, 500+i)},
			submission{"notifications", "/v1/notifications", "ntf-" + id, fmt.Sprintf(`{"event_id":"e-%s","user_id":"u-%d","template":"receipt"}`, id, i%7)},
		)
	}
	return subs
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestJobsEndToEnd is the design's whole flow under faults: a gateway, two
// workers (one killed mid-run), partnersim failing and dropping answers,
// every job submitted three times at once.
func TestJobsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("the job flow waits for asynq to redeliver a killed worker's tasks")
	}
	testJobsEndToEnd(t, testkit.Postgres(t, exampleTables()), "")
}

// TestJobsEndToEndThroughPgBouncer is the same flow with database_url on
// PgBouncer in transaction pooling mode, in pgx's exec mode, and
// database_direct_url on the database itself: the store, the job records,
// the relay, the workers' effects and reconcile all run through the
// pooler. It runs beside the package's other parallel tests: most of
// its time is spent waiting for asynq to redeliver the killed worker's
// tasks.
func TestJobsEndToEndThroughPgBouncer(t *testing.T) {
	if testing.Short() {
		t.Skip("the job flow waits for asynq to redeliver a killed worker's tasks")
	}
	t.Parallel()
	direct := testkit.Database(t, exampleTables())
	bouncer := topology.StartPgBouncer(t)
	testJobsEndToEnd(t, withExecMode(t, bouncer.URL(direct)), direct)
}

// withExecMode is dbURL with default_query_exec_mode=exec, as a
// database_url through a transaction pooler must be.
func withExecMode(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	return u.String()
}

// testJobsEndToEnd runs the flow with database_url dbURL and, when direct
// is set, database_direct_url direct; the test's own checks read through
// the direct connection.
func testJobsEndToEnd(t *testing.T, dbURL, direct string) {
	redisURL := testkit.RedisURL(t)
	pool := testkit.PoolAt(t, cmp.Or(direct, dbURL))
	seeded := rand.New(rand.NewPCG(1, 2))
	var randMu sync.Mutex
	sim := partnersim.New(partnersim.Options{FailRate: 0.1, DropRate: 0.1, Rand: func() float64 {
		randMu.Lock()
		defer randMu.Unlock()
		return seeded.Float64()
	}})
	partner := httptest.NewServer(sim)
	t.Cleanup(partner.Close)
	queue := "flow" + randomID()
	cfg := flowConfig(t, dbURL, redisURL, partner.URL, queue)
	if direct != "" {
		appendConfig(t, cfg, fmt.Sprintf("database_direct_url: %q\n", direct))
	}

	skus := []string{"sku-a", "sku-b", "sku-c"}
	for _, sku := range skus {
		if _, err := pool.Exec(context.Background(),
			`INSERT INTO inventory_items (tenant, sku, initial_stock, stock, fencing_token) VALUES ('acme', $1, 10000, 10000, 0)`, sku); err != nil {
			t.Fatalf("seed %s: %v", sku, err)
		}
	}

	g := startGateway(t, cfg)
	startWorker(t, cfg)
	doomed := startWorkerProcess(t, cfg)

	const perKind = 60
	run := randomID()
	subs := exampleSubmissions(run, perKind, skus, func(i int) int { return -(i%5 + 1) })
	// Each job three times at once; every answer is the job (202) or
	// "still in flight" (409), and every 202 names the same job.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 24)
	for _, s := range subs {
		want := job.ID("acme", s.route, s.key)
		for range 3 {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				r, err := sendErr(g.public, req{path: s.path, key: s.key, body: s.body})
				switch {
				case err != nil:
					t.Errorf("%s: %v", s.key, err)
				case r.status == 202:
					var j jobDoc
					if json.Unmarshal(r.body, &j) != nil || j.ID != want {
						t.Errorf("%s: 202 with job %s, want %s", s.key, r.body, want)
					}
				case r.status != 409:
					t.Errorf("%s: %d %s", s.key, r.status, r.body)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	total := len(subs)
	// Kill one worker once work is under way: its active tasks are
	// redelivered by asynq after their lease.
	testkit.Eventually(t, "some jobs done", 3*time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`) >= total/5
	})
	if err := doomed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = doomed.Wait()

	testkit.Eventually(t, "every job succeeded", 6*time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`) == total
	})

	// One effect per job, at our tables and at the partner.
	if n := count(t, pool, `SELECT count(*) FROM invoices`); n != perKind {
		t.Errorf("%d invoices, want %d", n, perKind)
	}
	if n := count(t, pool, `SELECT count(DISTINCT order_id) FROM invoices`); n != perKind {
		t.Errorf("%d distinct invoiced orders, want %d", n, perKind)
	}
	if n := count(t, pool, `SELECT count(*) FROM inventory_ledger`); n != perKind {
		t.Errorf("%d ledger rows, want %d", n, perKind)
	}
	if n := count(t, pool, `SELECT count(*) FROM inventory_items i WHERE i.stock <> i.initial_stock + COALESCE((SELECT sum(delta) FROM inventory_ledger l WHERE l.tenant = i.tenant AND l.sku = i.sku), 0)`); n != 0 {
		t.Errorf("%d SKUs whose stock is not initial + ledger", n)
	}
	if n := count(t, pool, `SELECT count(DISTINCT partner_charge_id) FROM payments WHERE partner_charge_id IS NOT NULL`); n != perKind {
		t.Errorf("%d payments with a partner charge id, want %d", n, perKind)
	}
	charges, messages := 0, 0
	for id, n := range sim.Applied() {
		if n != 1 {
			t.Errorf("partner applied %s %d times", id, n)
		}
		switch {
		case strings.HasPrefix(id, "ch_"):
			charges++
		case strings.HasPrefix(id, "msg_"):
			messages++
		}
	}
	if charges != perKind || messages != perKind {
		t.Errorf("partner applied %d charges and %d messages, want %d each", charges, messages, perKind)
	}
	// The replay of a submission still answers with its job.
	s := subs[0]
	if r := send(t, g.public, req{path: s.path, key: s.key, body: s.body}); r.status != 202 || decodeJob(t, r).ID != job.ID("acme", s.route, s.key) {
		t.Errorf("late replay: %d %s", r.status, r.body)
	}
	if r := getJob(t, g.public, job.ID("acme", s.route, s.key), "acme-key"); decodeJob(t, r).Status != "succeeded" || decodeJob(t, r).ResultRef == nil {
		t.Errorf("job document after success: %s", r.body)
	}
	if code, out, errOut := cli(t, nil, "reconcile", "--config", cfg, "--partner", partner.URL); code != 0 || !strings.Contains(out, "reconcile: clean") {
		t.Errorf("reconcile after the run: exit %d\n%s%s", code, out, errOut)
	}
	// Plant a duplicate charge: the partner charges payment p-…-0 a second
	// time under another key, as a careless client would.
	// partnersim fails and drops some requests on purpose: retry, with the
	// same key, until the planted charge is answered.
	var rogue resp
	testkit.Eventually(t, "the planted charge", 30*time.Second, func() bool {
		var err error
		rogue, err = sendErr(partner.URL, req{path: "/charges", key: "rogue-" + run, apiKey: "-", body: `{"payment_id":"p-` + run + `-0","amount_cents":500,"currency":"EUR"}`})
		return err == nil && rogue.status == 201
	})
	var planted struct{ ID string }
	_ = json.Unmarshal(rogue.body, &planted)
	code, out, _ := cli(t, nil, "reconcile", "--config", cfg, "--partner", partner.URL)
	if code != 1 || !strings.Contains(out, planted.ID) {
		t.Errorf("reconcile with a planted duplicate charge %s: exit %d, want 1 naming it\n%s", planted.ID, code, out)
	}
}

// A job that fails for good lands in the dead-letter list and runs again
// once replayed.
func TestDeadLetters(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	partner := httptest.NewServer(partnersim.New(partnersim.Options{}))
	t.Cleanup(partner.Close)
	queue := "dlq" + randomID()
	cfg := flowConfig(t, dbURL, redisURL, partner.URL, queue)
	if _, err := pool.Exec(context.Background(), `INSERT INTO inventory_items (tenant, sku, initial_stock, stock, fencing_token) VALUES ('acme', 'scarce', 0, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	key := "dlq-" + randomID()
	r := send(t, g.public, req{path: "/v1/inventory/adjustments", key: key, body: `{"adjustment_id":"take-5","sku":"scarce","delta":-5}`})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := decodeJob(t, r).ID
	var job jobDoc
	testkit.Eventually(t, "job failed", 2*time.Minute, func() bool {
		job = decodeJob(t, getJob(t, g.public, id, "acme-key"))
		return job.Status == "failed"
	})
	if job.Error == nil || *job.Error == "" {
		t.Errorf("failed job without an error: %+v", job)
	}
	code, out, errOut := cli(t, nil, "dlq", "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "inventory.adjust") {
		t.Fatalf("dlq list: exit %d\n%s%s", code, out, errOut)
	}
	// The operator adds stock, then replays.
	if _, err := pool.Exec(context.Background(), `UPDATE inventory_items SET initial_stock = initial_stock + 10, stock = stock + 10 WHERE sku = 'scarce'`); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, map[string]string{"USER": "erin"}, "dlq", "replay", id, "--reason", "stock added", "--config", cfg); code != 0 || !strings.Contains(out, "replayed") {
		t.Fatalf("dlq replay: exit %d\n%s%s", code, out, errOut)
	}
	// The replay is in the audit trail, as the console's would be.
	if n := count(t, pool, `SELECT count(*) FROM admin_actions WHERE job_id = '`+id+`' AND action = 'replay' AND via = 'cli' AND actor = 'cli:erin' AND reason = 'stock added'`); n != 1 {
		t.Errorf("audit rows of the CLI's replay: %d, want 1", n)
	}
	testkit.Eventually(t, "replayed job succeeded", 2*time.Minute, func() bool {
		return decodeJob(t, getJob(t, g.public, id, "acme-key")).Status == "succeeded"
	})
	if n := count(t, pool, `SELECT stock FROM inventory_items WHERE sku = 'scarce'`); n != 5 {
		t.Fatalf("stock after the replay: %d, want 5", n)
	}
	if code, out, _ := cli(t, nil, "dlq", "list", "--config", cfg); code != 0 || strings.Contains(out, id) {
		t.Fatalf("a succeeded job is still listed as dead: %s", out)
	}
	if code, _, errOut := cli(t, nil, "dlq", "replay", id, "--config", cfg); code != 1 || !strings.Contains(errOut, "not a failed job") {
		t.Fatalf("replay of a succeeded job: exit %d %s", code, errOut)
	}
}
