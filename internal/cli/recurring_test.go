package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
)

// slotReceiver counts the deliveries of each job and keeps the time of
// the first.
type slotReceiver struct {
	mu    sync.Mutex
	count map[string]int
	first map[string]time.Time
}

func newSlotReceiver(t *testing.T) (*slotReceiver, string) {
	t.Helper()
	s := &slotReceiver{count: map[string]int{}, first: map[string]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Webhook-Id")
		s.mu.Lock()
		s.count[id]++
		if _, ok := s.first[id]; !ok {
			s.first[id] = time.Now()
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// scheduleConfig declares sync.run, delivered over HTTP to url, and the
// every-2s schedule tick of tenant acme firing it.
func scheduleConfig(t *testing.T, dbURL, redisURL, url, queue, schedules string) string {
	t.Helper()
	return writeFile(t, "schedules.yaml", configHead("postgres", dbURL, redisURL)+fmt.Sprintf(`auth: {mode: api_key}
tenants:
  - {name: acme, api_key_sha256: [%q]}
  - {name: globex, api_key_sha256: [%q]}
jobs:
  - task: sync.run
    queue: %[3]s
    schema:
      type: object
      additionalProperties: false
      required: [account]
      properties:
        account: {type: string, minLength: 1}
    business_key: "sync:{account}"
    max_attempts: 3
    deliver:
      http: {url: %[4]q, secret: %[5]q, timeout: 5s}
routes:
  - {name: syncs, methods: [POST], path: /v1/syncs, enqueue: {task: sync.run}}
jobs_api:
  schedules: {min_interval: 1s, max_per_tenant: 3}
worker:
  admin_listen: "127.0.0.1:0"
  concurrency: 4
  queues: {%[3]s: 1}
  lock_ttl: 5s
  shutdown_timeout: 5s
  requeue_after: 1s
  requeue_interval: 1s
%[6]s`, sha("acme-key"), sha("globex-key"), queue, url, webhookSecret, schedules))
}

// An every-2s schedule run by two workers, the first stopped mid-run and
// the queue's Redis flushed later, fires each slot exactly once: one job
// per slot in the jobs table, each delivered once at the receiver, and no
// slot skipped.
func TestScheduleFiresEachSlotOnceAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a schedule for about 20 seconds")
	}
	rs := testenv.RedisServer(t)
	dbURL := testenv.Postgres(t, exampleTables())
	pool := testenv.PoolAt(t, dbURL)
	recv, url := newSlotReceiver(t)
	queue := "sched" + randomID()
	cfg := scheduleConfig(t, dbURL, "redis://"+rs.Addr()+"/0", url, queue, `schedules:
  - {id: tick, tenant: acme, task: sync.run, every: 2s, body: {account: a-1}, overlap: allow}
`)
	slots := func() int {
		return count(t, pool, `SELECT count(*) FROM schedule_slots WHERE schedule_id = 'tick'`)
	}
	stopA := startWorker(t, cfg)
	startWorker(t, cfg)
	waitFor(t, "4 slots fired", time.Minute, func() bool { return slots() >= 4 })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	at := slots()
	waitFor(t, "4 slots fired after the first worker stopped", time.Minute, func() bool { return slots() >= at+4 })
	if err := rs.Client.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	at = slots()
	waitFor(t, "4 slots fired after the queue's Redis was flushed", time.Minute, func() bool { return slots() >= at+4 })

	var fired []string
	rows, err := pool.Query(t.Context(), `SELECT outcome, COALESCE(job_id, '') FROM schedule_slots WHERE schedule_id = 'tick' ORDER BY slot`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var outcome, id string
		if err := rows.Scan(&outcome, &id); err != nil {
			t.Fatal(err)
		}
		if outcome != "fired" {
			t.Errorf("a slot was %s, want every slot fired", outcome)
		}
		fired = append(fired, id)
	}
	rows.Close()
	// Every fired job is delivered, even those whose task the flush lost.
	waitFor(t, "every fired job delivered", time.Minute, func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		for _, id := range fired {
			if recv.count[id] == 0 {
				return false
			}
		}
		return true
	})
	if n := count(t, pool, `SELECT count(*) FROM jobs WHERE route = 'schedule:tick' AND id = ANY($1)`, fired); n != len(fired) {
		t.Fatalf("%d jobs for %d slots", n, len(fired))
	}
	var gaps int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM (SELECT slot - lag(slot) OVER (ORDER BY slot) AS d FROM schedule_slots WHERE schedule_id = 'tick') s
 WHERE d <> interval '2 seconds'`).Scan(&gaps); err != nil || gaps != 0 {
		t.Fatalf("%d gaps between slots (%v): want one slot every 2s", gaps, err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	var late []time.Duration
	for _, id := range fired {
		if recv.count[id] != 1 {
			t.Errorf("job %s delivered %d times, want once", id, recv.count[id])
		}
		var slot time.Time
		if err := pool.QueryRow(t.Context(), `SELECT slot FROM schedule_slots WHERE job_id = $1`, id).Scan(&slot); err != nil {
			t.Fatal(err)
		}
		late = append(late, recv.first[id].Sub(slot))
	}
	slices.Sort(late)
	t.Logf("%d slots fired once each; lateness of delivery vs slot: p50 %s, p99 %s, max %s",
		len(fired), late[len(late)/2].Round(time.Millisecond), late[len(late)*99/100].Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond))
}
