package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// relayConfig is flowConfig with a relay that checks often: records
// unchanged for a second.
func relayConfig(t *testing.T, dbURL, redisURL, partnerURL, queue string) string {
	t.Helper()
	path := flowConfig(t, dbURL, redisURL, partnerURL, queue)
	// flowConfig ends inside the worker block.
	appendConfig(t, path, "  requeue_after: 1s\n  requeue_interval: 250ms\n")
	return path
}

// relayWorld is a gateway with the four example routes on its own queue,
// the partner its workers call, and the tables to check.
type relayWorld struct {
	cfg, queue string
	pool       *pgxpool.Pool
	sim        *partnersim.Sim
	g          *gatewayProc
}

func newRelayWorld(t *testing.T, redisURL string) *relayWorld {
	t.Helper()
	dbURL := testkit.Postgres(t, exampleTables())
	pool := testkit.PoolAt(t, dbURL)
	if _, err := pool.Exec(context.Background(),
		`INSERT INTO inventory_items (tenant, sku, initial_stock, stock, fencing_token) VALUES ('acme', 'sku-r', 1000, 1000, 0)`); err != nil {
		t.Fatal(err)
	}
	sim := partnersim.New(partnersim.Options{})
	partner := httptest.NewServer(sim)
	t.Cleanup(partner.Close)
	w := &relayWorld{queue: "relay" + randomID(), pool: pool, sim: sim}
	w.cfg = relayConfig(t, dbURL, redisURL, partner.URL, w.queue)
	w.g = startGateway(t, w.cfg)
	return w
}

// submissions are n jobs of each example kind; each adjustment takes one
// from sku-r, the only stocked SKU.
func (w *relayWorld) submissions(n int) []submission {
	return exampleSubmissions(randomID(), n, []string{"sku-r"}, func(int) int { return -1 })
}

// accept submits each job once and wants the job (202) for each.
func (w *relayWorld) accept(t *testing.T, subs []submission) {
	t.Helper()
	for _, s := range subs {
		r := send(t, w.g.public, req{path: s.path, key: s.key, body: s.body})
		if r.status != 202 || decodeJob(t, r).ID != job.ID("acme", s.route, s.key) {
			t.Fatalf("%s: %d %s, want 202 with its job", s.key, r.status, r.body)
		}
	}
}

// everyJobOnce waits until every job has succeeded and checks that each
// had its effect exactly once, here and at the partner, and that a retry
// of each request still answers with its job.
func (w *relayWorld) everyJobOnce(t *testing.T, subs []submission) {
	t.Helper()
	total := len(subs)
	testkit.Eventually(t, "every job succeeded", 3*time.Minute, func() bool {
		return count(t, w.pool, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`) == total
	})
	perKind := total / 4
	for q, want := range map[string]int{
		`SELECT count(DISTINCT order_id) FROM invoices`:                                                       perKind,
		`SELECT count(*) FROM invoices`:                                                                       perKind,
		`SELECT count(*) FROM inventory_ledger`:                                                               perKind,
		`SELECT 1000 - stock FROM inventory_items WHERE sku = 'sku-r'`:                                        perKind,
		`SELECT count(DISTINCT partner_charge_id) FROM payments WHERE partner_charge_id IS NOT NULL`:          perKind,
		`SELECT count(*) FROM notifications`:                                                                  perKind,
		`SELECT count(*) FROM job_executions WHERE status = 'succeeded'`:                                      total,
		`SELECT count(*) FROM jobs j JOIN job_executions e ON e.tenant = j.tenant AND e.key = j.business_key`: total,
	} {
		if n := count(t, w.pool, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
	applied := w.sim.Applied()
	if len(applied) != 2*perKind {
		t.Errorf("the partner applied %d effects, want %d", len(applied), 2*perKind)
	}
	for id, n := range applied {
		if n != 1 {
			t.Errorf("the partner applied %s %d times", id, n)
		}
	}
	for _, s := range subs {
		r := send(t, w.g.public, req{path: s.path, key: s.key, body: s.body})
		if r.status != 202 || r.header.Get("Idempotent-Replayed") != "true" || decodeJob(t, r).ID != job.ID("acme", s.route, s.key) {
			t.Errorf("retry of %s: %d replayed=%q %s", s.key, r.status, r.header.Get("Idempotent-Replayed"), r.body)
		}
	}
}

func inspectorFor(t *testing.T, redisURL string) *asynq.Inspector {
	t.Helper()
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	inspector := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = inspector.Close() })
	return inspector
}

// The queue lost the tasks of accepted jobs: the worker's relay enqueues
// them again and every job has its effect exactly once.
func TestRelayDeliversLostTasks(t *testing.T) {
	redisURL := testkit.RedisURL(t)
	w := newRelayWorld(t, redisURL)
	inspector := inspectorFor(t, redisURL)
	t.Cleanup(func() { _ = inspector.DeleteQueue(w.queue, true) })
	subs := w.submissions(5)
	w.accept(t, subs)
	for _, s := range subs {
		if err := inspector.DeleteTask(w.queue, job.ID("acme", s.route, s.key)); err != nil {
			t.Fatalf("delete the task of %s: %v", s.key, err)
		}
	}
	startWorker(t, w.cfg)
	w.everyJobOnce(t, subs)
}

// redisServer is a Redis of the test's own, without persistence, to kill
// and start again.
type redisServer struct {
	port string
	cmd  *exec.Cmd
}

func newRedisServer(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not in PATH: skipping the broker restart test")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_ = ln.Close()
	s := &redisServer{port: port}
	s.start(t)
	t.Cleanup(func() { s.kill(t) })
	return s
}

func (s *redisServer) url() string { return "redis://127.0.0.1:" + s.port + "/0" }

func (s *redisServer) start(t *testing.T) {
	t.Helper()
	s.cmd = exec.Command("redis-server", "--port", s.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + s.port})
	defer rdb.Close()
	testkit.Eventually(t, "private redis-server up", 30*time.Second, func() bool {
		return rdb.Ping(context.Background()).Err() == nil
	})
}

func (s *redisServer) kill(t *testing.T) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	var exit *exec.ExitError
	if err := s.cmd.Wait(); err != nil && !errors.As(err, &exit) {
		t.Errorf("redis-server: %v", err)
	}
	s.cmd = nil
}

// The incident: Redis, without persistence, dies after jobs were accepted
// and comes back empty. Jobs accepted before it died lost their tasks;
// jobs submitted while it was down are accepted all the same (202: the
// record is committed). Once it is back, the relay delivers every one of
// them and each has its effect exactly once.
func TestBrokerRestartLosesNoJob(t *testing.T) {
	rs := newRedisServer(t)
	w := newRelayWorld(t, rs.url())
	subs := w.submissions(4)
	before, during := subs[:8], subs[8:]
	w.accept(t, before)
	rs.kill(t)
	w.accept(t, during)
	rs.start(t)
	if n := count(t, w.pool, `SELECT count(*) FROM jobs WHERE status = 'queued'`); n != len(subs) {
		t.Fatalf("%d queued jobs, want every accepted one (%d)", n, len(subs))
	}
	startWorker(t, w.cfg)
	w.everyJobOnce(t, subs)
}

// An operator's view of a stuck job and its remedy: reconcile reports
// every job unfinished for too long and whether its task exists, and
// `jobs requeue` enqueues the missing ones.
func TestStuckJobsReportAndRequeue(t *testing.T) {
	redisURL := testkit.RedisURL(t)
	w := newRelayWorld(t, redisURL)
	inspector := inspectorFor(t, redisURL)
	t.Cleanup(func() { _ = inspector.DeleteQueue(w.queue, true) })
	subs := w.submissions(1)[:3] // an invoice, an adjustment and a charge
	w.accept(t, subs)
	var ids []string
	for _, s := range subs {
		ids = append(ids, job.ID("acme", s.route, s.key))
	}
	for _, id := range ids[:2] {
		if err := inspector.DeleteTask(w.queue, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.pool.Exec(context.Background(), `UPDATE jobs SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := cli(t, nil, "reconcile", "--config", w.cfg)
	if code != 1 || !strings.Contains(errOut, "reconcile: 3 violation(s)") {
		t.Fatalf("reconcile with stuck jobs: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for i, want := range []string{
		fmt.Sprintf("violation [stuck_jobs] %s acme/invoice:o-", ids[0]),
		fmt.Sprintf("invoice.create job %s is queued, unchanged for 1h0m", ids[0]),
		fmt.Sprintf("inventory.adjust job %s is queued, unchanged for 1h0m", ids[1]),
		fmt.Sprintf("payment.charge job %s is queued, unchanged for 1h0m", ids[2]),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reconcile output lacks %q (line %d)", want, i)
		}
	}
	lines := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		for _, id := range ids {
			if strings.HasPrefix(line, "violation [stuck_jobs] "+id) {
				lines[id] = line
			}
		}
	}
	if !strings.HasSuffix(lines[ids[0]], "its task is missing from queue "+w.queue) ||
		!strings.HasSuffix(lines[ids[1]], "its task is missing from queue "+w.queue) ||
		!strings.HasSuffix(lines[ids[2]], "its task is pending in queue "+w.queue) {
		t.Errorf("stuck lines do not say where each task is:\n%s", out)
	}
	if code, out, errOut := cli(t, nil, "reconcile", "--config", w.cfg, "--stuck-after", "2h"); code != 0 || !strings.Contains(out, "reconcile: clean") {
		t.Errorf("reconcile --stuck-after 2h: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := cli(t, nil, "reconcile", "--config", w.cfg, "--stuck-after", "-1m"); code != 2 || !strings.Contains(errOut, "--stuck-after -1m0s: must not be negative") {
		t.Errorf("reconcile --stuck-after -1m: exit %d %s", code, errOut)
	}

	code, out, errOut = cli(t, nil, "jobs", "requeue", ids[0], ids[1], ids[2], "--config", w.cfg)
	if code != 0 || !strings.Contains(out, ids[0]+": requeued") || !strings.Contains(out, ids[1]+": requeued") || !strings.Contains(out, ids[2]+": task present") {
		t.Fatalf("jobs requeue: exit %d\n%s%s", code, out, errOut)
	}
	for _, id := range ids {
		if _, err := inspector.GetTaskInfo(w.queue, id); err != nil {
			t.Errorf("task of %s after jobs requeue: %v", id, err)
		}
	}
	if code, out, _ := cli(t, nil, "jobs", "requeue", ids[0], "--config", w.cfg); code != 0 || !strings.Contains(out, ids[0]+": task present") {
		t.Errorf("a second requeue: exit %d %s", code, out)
	}

	if _, err := w.pool.Exec(context.Background(), `UPDATE jobs SET status = CASE id WHEN $1 THEN 'succeeded' ELSE 'failed' END WHERE id IN ($1, $2)`, ids[0], ids[1]); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:2] {
		_ = inspector.DeleteTask(w.queue, id)
	}
	if code, out, errOut := cli(t, nil, "jobs", "requeue", ids[0], "--config", w.cfg); code != 0 || !strings.Contains(out, ids[0]+": already succeeded") {
		t.Errorf("requeue of a succeeded job: exit %d %s%s", code, out, errOut)
	}
	if code, _, errOut := cli(t, nil, "jobs", "requeue", ids[1], "job_nope", "--config", w.cfg); code != 1 ||
		!strings.Contains(errOut, ids[1]+": failed, not requeued: use `idemgate dlq replay "+ids[1]+"`") || !strings.Contains(errOut, "job_nope: no such job") {
		t.Errorf("requeue of a failed and an unknown job: exit %d %s", code, errOut)
	}
	for _, id := range ids[:2] {
		if _, err := inspector.GetTaskInfo(w.queue, id); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("a finished job's task was enqueued (%s): %v", id, err)
		}
	}
}
