package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// scheduledDoc is the part of the job document a schedule shows.
type scheduledDoc struct {
	ID        string     `json:"id"`
	Status    string     `json:"status"`
	Attempts  int        `json:"attempts"`
	CreatedAt time.Time  `json:"created_at"`
	NotBefore *time.Time `json:"not_before"`
}

// clockedReceiver answers every delivery 200 and notes when each order's
// deliveries came in.
type clockedReceiver struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (c *clockedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	b, _ := io.ReadAll(r.Body)
	var env struct {
		Data struct {
			OrderID string `json:"order_id"`
		} `json:"data"`
	}
	_ = json.Unmarshal(b, &env)
	c.mu.Lock()
	c.at[env.Data.OrderID] = append(c.at[env.Data.OrderID], now)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"result_ref": "r-%s"}`, env.Data.OrderID)
}

func (c *clockedReceiver) of(orderID string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at[orderID]...)
}

// A job scheduled 3 s ahead, through a real gateway, workers, Redis and
// PostgreSQL: refused schedules record nothing; the accepted one is
// scheduled with not_before = created_at + 3 s, which a retry does not
// move and another schedule under the same key cannot change; the worker
// running when it was accepted stops, the broker restarts empty, and two
// new workers (their relays re-enqueue the lost task for its time) run it
// once, not before not_before.
func TestScheduledJobEndToEnd(t *testing.T) {
	rs := newRedisServer(t)
	dbURL := testkit.Postgres(t, exampleTables())
	pool := testkit.PoolAt(t, dbURL)
	rcv := &clockedReceiver{at: map[string][]time.Time{}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	queue := "sch" + randomID()
	cfg := deliverConfig(t, dbURL, rs.url(), srv.URL+"/hooks/shipments", queue)
	appendConfig(t, cfg, "  requeue_after: 1s\n  requeue_interval: 250ms\n")
	g := startGateway(t, cfg)
	run := randomID()
	post := func(key, orderID string, header ...string) resp {
		t.Helper()
		h := http.Header{}
		for i := 0; i+1 < len(header); i += 2 {
			h.Add(header[i], header[i+1])
		}
		return send(t, g.public, req{path: "/v1/shipments", key: key, header: h,
			body: fmt.Sprintf(`{"order_id": %q, "quantity": 1}`, orderID)})
	}

	// Refused schedules: nothing recorded, nothing enqueued.
	for i, tc := range []struct {
		header []string
		status int
		slug   string
	}{
		{[]string{"Idemgate-Delay", "3", "Idemgate-Not-Before", time.Now().Add(time.Hour).Format(time.RFC3339)}, 400, "invalid-schedule"},
		{[]string{"Idemgate-Delay", "three"}, 400, "invalid-schedule"},
		{[]string{"Idemgate-Delay", "-3"}, 400, "invalid-schedule"},
		{[]string{"Idemgate-Not-Before", "tomorrow at eight"}, 400, "invalid-schedule"},
		{[]string{"Idemgate-Not-Before", "2030-01-02T08:00:00"}, 400, "invalid-schedule"},
		{[]string{"Idemgate-Delay", "2592001"}, 422, "schedule-out-of-range"},
		{[]string{"Idemgate-Not-Before", time.Now().Add(800 * time.Hour).Format(time.RFC3339)}, 422, "schedule-out-of-range"},
	} {
		r := post(fmt.Sprintf("bad-%d-%s", i, run), fmt.Sprintf("bad-%d-%s", i, run), tc.header...)
		if r.status != tc.status || r.problemType(t) != tc.slug {
			t.Errorf("schedule %q: %d %s, want %d %s", tc.header, r.status, r.body, tc.status, tc.slug)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM jobs`); n != 0 {
		t.Errorf("refused schedules recorded %d jobs", n)
	}
	inspector := inspectorFor(t, rs.url())
	if qs, err := inspector.Queues(); err != nil || len(qs) != 0 {
		t.Errorf("refused schedules enqueued tasks: queues %v", qs)
	}

	// Worker A runs a job whose time has passed at once.
	stopA := startWorker(t, cfg)
	past := post("past-"+run, "past-"+run, "Idemgate-Not-Before", time.Now().Add(-time.Hour).Format(time.RFC3339))
	if d := decodeDoc[scheduledDoc](t, past); past.status != http.StatusAccepted || d.Status != "queued" || d.NotBefore == nil {
		t.Fatalf("a time past: %d %s, want 202 queued with its not_before", past.status, past.body)
	}
	testkit.Eventually(t, "worker A ran the job due at once", time.Minute, func() bool { return len(rcv.of("past-"+run)) == 1 })

	// The job scheduled 3 s ahead.
	key, order := "sched-"+run, "sched-"+run
	first := post(key, order, "Idemgate-Delay", "3")
	j := decodeDoc[scheduledDoc](t, first)
	if first.status != http.StatusAccepted || j.Status != "scheduled" || j.NotBefore == nil || !j.NotBefore.Equal(j.CreatedAt.Add(3*time.Second)) {
		t.Fatalf("Idemgate-Delay: 3: %d %s, want 202 scheduled with not_before = created_at + 3s", first.status, first.body)
	}
	notBefore := *j.NotBefore
	again := post(key, order, "Idemgate-Delay", "3")
	if again.status != http.StatusAccepted || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Errorf("the retry: %d replayed=%q %s, want the first answer replayed", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}
	if r := post(key, order, "Idemgate-Delay", "1"); r.status != http.StatusUnprocessableEntity || r.problemType(t) != "idempotency-key-reused" {
		t.Errorf("the same key with another schedule: %d %s, want 422 idempotency-key-reused", r.status, r.body)
	}

	// Worker A stops and the broker comes back empty; two other workers
	// take over.
	if err := stopA(); err != nil {
		t.Fatalf("worker A: %v", err)
	}
	rs.kill(t)
	rs.start(t)
	wiped := time.Now()
	if wiped.After(notBefore) {
		t.Logf("the broker restarted %s after not_before: the machine is slow; the job must still run once", wiped.Sub(notBefore))
	}
	startWorker(t, cfg)
	startWorker(t, cfg)

	var got scheduledDoc
	testkit.Eventually(t, "the scheduled job succeeded", 2*time.Minute, func() bool {
		got = decodeDoc[scheduledDoc](t, getJob(t, g.public, j.ID, "acme-key"))
		return got.Status == "succeeded" || got.Status == "failed"
	})
	if got.Status != "succeeded" || got.Attempts != 1 || got.NotBefore == nil || !got.NotBefore.Equal(notBefore) {
		t.Errorf("job %+v, want succeeded after one attempt with not_before %s", got, notBefore)
	}
	// Count once the queue holds nothing that could deliver it again.
	testkit.Eventually(t, "the queue drained", time.Minute, func() bool {
		qi, err := inspector.GetQueueInfo(queue)
		return err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0
	})
	deliveries := rcv.of(order)
	if len(deliveries) != 1 {
		t.Fatalf("the receiver got %d deliveries, want 1", len(deliveries))
	}
	if deliveries[0].Before(notBefore) {
		t.Errorf("the receiver got the job %s before its not_before", notBefore.Sub(deliveries[0]))
	}
	var started time.Time
	var attempts int
	if err := pool.QueryRow(context.Background(),
		`SELECT min(started_at), count(*) FROM job_attempts WHERE job_id = $1`, j.ID).Scan(&started, &attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || started.Before(notBefore) {
		t.Errorf("ledger: %d attempts, the first started %s, want one, at or after not_before %s", attempts, started, notBefore)
	}
	t.Logf("not_before %s; attempt started %s after it, delivered %s after it",
		notBefore.Format(time.RFC3339Nano), started.Sub(notBefore), deliveries[0].Sub(notBefore))

	if code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--job", j.ID); code != 0 ||
		!strings.Contains(out, "not before "+notBefore.UTC().Format(time.RFC3339Nano)) {
		t.Errorf("explain --job: exit %d, want it to show not_before %s\n%s%s", code, notBefore, out, errOut)
	}

	// A retry long after still replays the job, with its not_before.
	if r := post(key, order, "Idemgate-Delay", "3"); r.status != http.StatusAccepted || decodeDoc[scheduledDoc](t, r).ID != j.ID ||
		!decodeDoc[scheduledDoc](t, r).NotBefore.Equal(notBefore) {
		t.Errorf("a retry after the run: %d %s", r.status, r.body)
	}
}

// reconcile: a job waiting for its time is not stuck, however old its
// record; once due, its age counts from not_before, and it is reported as
// the queued job it now is.
func TestReconcileScheduledJob(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	queue := "rsch" + randomID()
	cfg := deliverConfig(t, dbURL, redisURL, "http://127.0.0.1:9/hooks", queue)
	inspector := inspectorFor(t, redisURL)
	t.Cleanup(func() { _ = inspector.DeleteQueue(queue, true) })
	g := startGateway(t, cfg)
	h := http.Header{"Idemgate-Delay": {"7200"}}
	r := send(t, g.public, req{path: "/v1/shipments", key: "rec-" + randomID(), header: h, body: `{"order_id": "o-r", "quantity": 1}`})
	if r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := decodeDoc[scheduledDoc](t, r).ID
	if _, err := pool.Exec(context.Background(), `UPDATE jobs SET updated_at = now() - interval '3 hours' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, nil, "reconcile", "--config", cfg, "--stuck-after", "1h"); code != 0 || !strings.Contains(out, "reconcile: clean") {
		t.Errorf("a job scheduled 2h ahead, its record 3h old: exit %d, want clean\n%s%s", code, out, errOut)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE jobs SET not_before = now() - interval '2 hours' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, nil, "reconcile", "--config", cfg, "--stuck-after", "1h")
	if want := "shipment.book job " + id + " is queued, unchanged for 2h0m"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("due 2h ago and never run: exit %d, want 1 and %q\n%s%s", code, want, out, errOut)
	}
}
