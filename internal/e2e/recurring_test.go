package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/idemgate/idemgate/client"
	"github.com/idemgate/idemgate/internal/testkit"
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
	rs := testkit.RedisServer(t)
	dbURL := testkit.Postgres(t, exampleTables())
	pool := testkit.PoolAt(t, dbURL)
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
	testkit.Eventually(t, "4 slots fired", time.Minute, func() bool { return slots() >= 4 })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	at := slots()
	testkit.Eventually(t, "4 slots fired after the first worker stopped", time.Minute, func() bool { return slots() >= at+4 })
	if err := rs.Client.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	at = slots()
	testkit.Eventually(t, "4 slots fired after the queue's Redis was flushed", time.Minute, func() bool { return slots() >= at+4 })

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
	testkit.Eventually(t, "every fired job delivered", time.Minute, func() bool {
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

// call sends method path with body to base as acme (or apiKey), with
// the headers h.
func call(t *testing.T, base, method, path, apiKey, body string, h map[string]string) (int, map[string]any) {
	t.Helper()
	hr, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		hr.Header.Set(k, v)
	}
	if hr.Header.Get("Authorization") == "" {
		hr.Header.Set("Authorization", "Bearer "+apiKey)
	}
	res, err := client.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	return res.StatusCode, doc
}

// The schedules API: a PUT creates and then converges, refusals name
// what is wrong, the quota holds, a trigger fires once per key, GET
// shows the last fire, pause and resume, DELETE, and the admin
// backfill meets the slots that fired.
func TestSchedulesAPI(t *testing.T) {
	dbURL := testkit.Postgres(t, exampleTables())
	pool := testkit.PoolAt(t, dbURL)
	recv, url := newSlotReceiver(t)
	queue := "schedapi" + randomID()
	cfg := scheduleConfig(t, dbURL, testkit.RedisURL(t), url, queue, "")
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	put := func(id, body string) (int, map[string]any) {
		return call(t, g.public, http.MethodPut, "/v1/schedules/"+id, "acme-key", body, nil)
	}
	const nightly = `{"task": "sync.run", "cron": "0 2 * * *", "timezone": "Europe/Paris", "body": {"account": "a-1"}, "catchup": "one", "catchup_window": "1h"}`
	status, doc := put("nightly", nightly)
	if status != http.StatusCreated || doc["next_fire_at"] == nil || len(doc["next_fire_times"].([]any)) != 5 || doc["source"] != "api" {
		t.Fatalf("PUT: %d %v", status, doc)
	}
	first := doc["next_fire_times"].([]any)
	if at, _ := time.Parse(time.RFC3339, first[0].(string)); at.In(paris(t)).Hour() != 2 {
		t.Fatalf("next fire %v: want 02:00 in Paris", first[0])
	}
	status, again := put("nightly", nightly)
	if status != http.StatusOK || again["next_fire_at"] != doc["next_fire_at"] || again["created_at"] != doc["created_at"] {
		t.Fatalf("PUT again: %d %v; want 200, the same schedule", status, again)
	}
	if status, got := call(t, g.public, http.MethodGet, "/v1/schedules/night%6Cy", "acme-key", "", nil); status != http.StatusOK || got["id"] != "nightly" {
		t.Fatalf("GET with a percent-encoded id: %d %v; want the schedule nightly", status, got)
	}
	if status, list := call(t, g.public, http.MethodGet, "/v1/schedules", "globex-key", "", nil); status != http.StatusOK || len(list["schedules"].([]any)) != 0 {
		t.Fatalf("globex lists %d %v: want none of acme's", status, list)
	}

	for _, c := range []struct {
		name, body, field string
	}{
		{"bad cron", `{"task": "sync.run", "cron": "0 25 * * *", "body": {"account": "a"}}`, "cron"},
		{"unknown zone", `{"task": "sync.run", "cron": "0 2 * * *", "timezone": "Mars/Olympus", "body": {"account": "a"}}`, "timezone"},
		{"body against the schema", `{"task": "sync.run", "every": "1h", "body": {"account": 7}}`, "body.account"},
		{"below min_interval", `{"task": "sync.run", "every": "500ms", "body": {"account": "a"}}`, "every"},
		{"unknown task", `{"task": "nope", "every": "1h", "body": {"account": "a"}}`, "task"},
	} {
		status, p := put("bad", c.body)
		fields, _ := p["errors"].([]any)
		found := false
		for _, f := range fields {
			found = found || f.(map[string]any)["field"] == c.field
		}
		if status != http.StatusUnprocessableEntity || !strings.HasSuffix(p["type"].(string), "/invalid-payload") || !found {
			t.Errorf("%s: %d %v; want 422 invalid-payload naming %s", c.name, status, p, c.field)
		}
	}
	for _, id := range []string{"two", "three"} {
		if status, p := put(id, `{"task": "sync.run", "every": "1h", "body": {"account": "a"}}`); status != http.StatusCreated {
			t.Fatalf("PUT %s: %d %v", id, status, p)
		}
	}
	if status, p := put("four", `{"task": "sync.run", "every": "1h", "body": {"account": "a"}}`); status != http.StatusUnprocessableEntity ||
		!strings.HasSuffix(p["type"].(string), "/schedule-quota-exceeded") {
		t.Fatalf("a fourth schedule over max_per_tenant 3: %d %v", status, p)
	}

	trigger := func(key string) (int, map[string]any) {
		h := map[string]string{}
		if key != "" {
			h["Idempotency-Key"] = key
		}
		return call(t, g.public, http.MethodPost, "/v1/schedules/nightly/trigger", "acme-key", "", h)
	}
	if status, p := trigger(""); status != http.StatusBadRequest {
		t.Fatalf("trigger without a key: %d %v", status, p)
	}
	status, fired := trigger("run-now-1")
	if status != http.StatusAccepted {
		t.Fatalf("trigger: %d %v", status, fired)
	}
	if status, same := trigger("run-now-1"); status != http.StatusAccepted || same["id"] != fired["id"] {
		t.Fatalf("trigger again with the key: %d %v; want the same job", status, same)
	}
	testkit.Eventually(t, "the triggered job delivered", 30*time.Second, func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		return recv.count[fired["id"].(string)] == 1
	})

	if status, p := call(t, g.public, http.MethodPost, "/v1/schedules/nightly/pause", "acme-key", "", nil); status != http.StatusOK || p["paused"] != true {
		t.Fatalf("pause: %d %v", status, p)
	}
	if status, p := call(t, g.public, http.MethodPost, "/v1/schedules/nightly/resume", "acme-key", "", nil); status != http.StatusOK || p["paused"] != false {
		t.Fatalf("resume: %d %v", status, p)
	}

	// The admin backfill fires the past nights; again, the same jobs.
	backfill := func() (int, map[string]any) {
		return call(t, g.admin, http.MethodPost, "/admin/schedules/nightly/backfill", "", `{"from": "2026-03-28T00:00:00Z", "to": "2026-03-30T12:00:00Z"}`,
			map[string]string{"Authorization": "Bearer " + adminToken})
	}
	status, bf := backfill()
	if status != http.StatusOK || len(bf["fires"].([]any)) != 2 || bf["tenant"] != "acme" {
		t.Fatalf("backfill: %d %v; want 2 slots (28 and 30 March at 02:00 Paris: on the 29th 02:00 does not exist)", status, bf)
	}
	if status, bf2 := backfill(); status != http.StatusOK || fmt.Sprint(bf2["fires"]) == "" ||
		bf2["fires"].([]any)[1].(map[string]any)["job_id"] != bf["fires"].([]any)[1].(map[string]any)["job_id"] {
		t.Fatalf("backfill again: %d %v", status, bf2)
	}
	if n := count(t, pool, `SELECT count(*) FROM jobs WHERE route = 'schedule:nightly'`); n != 3 {
		t.Fatalf("%d jobs of nightly, want 3 (a trigger and 2 backfilled)", n)
	}
	status, doc = call(t, g.public, http.MethodGet, "/v1/schedules/nightly", "acme-key", "", nil)
	last, _ := doc["last_fire"].(map[string]any)
	if status != http.StatusOK || last == nil || last["job_id"] == nil || last["slot"] != "2026-03-30T00:00:00Z" {
		t.Fatalf("GET: %d %v; want last_fire the latest backfilled slot", status, doc)
	}
	code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--schedule", "nightly", "--last", "5")
	if code != 0 || !strings.Contains(out, "schedule nightly of tenant acme: task sync.run, 0 2 * * * in Europe/Paris") ||
		!strings.Contains(out, "2026-03-30T00:00:00Z  fired") || !strings.Contains(out, "2026-03-28T01:00:00Z  fired") {
		t.Errorf("explain --schedule: %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := cli(t, nil, "explain", "--config", cfg, "--schedule", "nope"); code != 1 || !strings.Contains(errOut, `no schedule "nope"`) {
		t.Errorf("explain --schedule nope: %d %s", code, errOut)
	}
	if code, _, errOut := cli(t, nil, "explain", "--config", cfg, "--schedule", "nightly", "--job", "j"); code != 2 || !strings.Contains(errOut, "--schedule takes one schedule id") {
		t.Errorf("explain --schedule --job: %d %s", code, errOut)
	}
	if status, _ := call(t, g.public, http.MethodDelete, "/v1/schedules/nightly", "acme-key", "", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	if status, _ := call(t, g.public, http.MethodGet, "/v1/schedules/nightly", "acme-key", "", nil); status != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d", status)
	}
}

func paris(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// The Go SDK drives the schedules API: put, get, list, pause, resume,
// trigger once per key, delete, and the quota's refusal.
func TestSchedulesSDK(t *testing.T) {
	dbURL := testkit.Postgres(t, exampleTables())
	_, url := newSlotReceiver(t)
	cfg := scheduleConfig(t, dbURL, testkit.RedisURL(t), url, "schedsdk"+randomID(), "")
	g := startGateway(t, cfg)
	c := sdk.New(g.public, sdk.WithAPIKey("acme-key"))
	ctx := t.Context()
	decl := sdk.ScheduleDeclaration{Task: "sync.run", Every: new("15m"), Body: map[string]any{"account": "a-1"}}
	s, created, err := c.PutSchedule(ctx, "sync", decl)
	if err != nil || !created || len(s.NextFireTimes) != 5 || s.NextFireTimes[1].Sub(s.NextFireTimes[0]) != 15*time.Minute {
		t.Fatalf("PutSchedule: %+v %v %v", s, created, err)
	}
	if _, created, err := c.PutSchedule(ctx, "sync", decl); err != nil || created {
		t.Fatalf("PutSchedule again: created %v, %v; want replaced", created, err)
	}
	if got, err := c.GetSchedule(ctx, "sync"); err != nil || got.Id != "sync" || got.LastFire != nil {
		t.Fatalf("GetSchedule: %+v %v", got, err)
	}
	if list, err := c.ListSchedules(ctx); err != nil || len(list) != 1 {
		t.Fatalf("ListSchedules: %v %v", list, err)
	}
	if p, err := c.PauseSchedule(ctx, "sync"); err != nil || !p.Paused {
		t.Fatalf("PauseSchedule: %+v %v", p, err)
	}
	if p, err := c.ResumeSchedule(ctx, "sync"); err != nil || p.Paused {
		t.Fatalf("ResumeSchedule: %+v %v", p, err)
	}
	j1, err := c.TriggerSchedule(ctx, "sync", sdk.WithKey("now-1"))
	j2, err2 := c.TriggerSchedule(ctx, "sync", sdk.WithKey("now-1"))
	if err != nil || err2 != nil || j1.Id == "" || j1.Id != j2.Id {
		t.Fatalf("TriggerSchedule twice with one key: %s %v, %s %v; want one job", j1.Id, err, j2.Id, err2)
	}
	for _, id := range []string{"b", "c"} {
		if _, _, err := c.PutSchedule(ctx, id, decl); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.PutSchedule(ctx, "d", decl); !sdk.IsScheduleQuotaExceeded(err) {
		t.Fatalf("a fourth schedule: %v; want schedule-quota-exceeded", err)
	}
	if err := c.DeleteSchedule(ctx, "sync"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx, "sync"); err == nil {
		t.Fatal("GetSchedule after DeleteSchedule: no error")
	}
}
