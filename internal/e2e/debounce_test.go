package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// syncReceiver records every delivery of the crm jobs: the account and
// the revision it carried. It holds the deliveries of an account whose
// id starts with "hold-" until the test releases them.
type syncReceiver struct {
	mu      sync.Mutex
	got     map[string][]int // account → the revisions delivered, in order
	release chan struct{}
}

func (s *syncReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var env struct {
		Data struct {
			Account string `json:"account_id"`
			Rev     int    `json:"rev"`
		} `json:"data"`
	}
	_ = json.NewDecoder(r.Body).Decode(&env)
	s.mu.Lock()
	s.got[env.Data.Account] = append(s.got[env.Data.Account], env.Data.Rev)
	s.mu.Unlock()
	if strings.HasPrefix(env.Data.Account, "hold-") && env.Data.Rev == 1 {
		select {
		case <-s.release:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"result_ref": "sync-%s-%d"}`, env.Data.Account, env.Data.Rev)
}

// delivered returns the revisions delivered for account.
func (s *syncReceiver) delivered(account string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.got[account]...)
}

type debounceDoc struct {
	jobDoc
	Debounce *struct {
		Key       string    `json:"key"`
		Coalesced int       `json:"coalesced"`
		FirstAt   time.Time `json:"first_at"`
		Until     time.Time `json:"until"`
	} `json:"debounce"`
}

// debounceConfig declares three debounced jobs delivered to url: crm.sync
// (trailing, 5s, at most 60s), crm.lead (leading, 2s, at most 60s) and
// crm.stream (trailing, 1s, at most 3s). With a pool, the three wait in
// the fairness pool of that name, whose window is 2.
func debounceConfig(t *testing.T, dbURL, redisURL, url, queue, pool string) string {
	t.Helper()
	var fairness, jobs, routes strings.Builder
	if pool != "" {
		fmt.Fprintf(&fairness, "fairness:\n  - {name: %s, window: 2}\n", pool)
	}
	for _, j := range []struct{ task, debounce string }{
		{"crm.sync", `{key: "{tenant}:{account_id}", delay: 5s, max_delay: 60s}`},
		{"crm.lead", `{key: "{tenant}:{account_id}", delay: 2s, max_delay: 60s, mode: leading}`},
		{"crm.stream", `{key: "{tenant}:{account_id}", delay: 1s, max_delay: 3s, mode: trailing}`},
	} {
		fmt.Fprintf(&jobs, `  - task: %s
    queue: %s
    schema:
      type: object
      required: [account_id, rev]
      properties: {account_id: {type: string, minLength: 1}, rev: {type: integer}}
    business_key: "crm:{account_id}:{rev}"
    resource: "account:{account_id}"
    debounce: %s
    deliver: {http: {url: %q, secret: %q, timeout: 30s}}
`, j.task, queue, j.debounce, url, webhookSecret)
		if pool != "" {
			fmt.Fprintf(&jobs, "    fairness: %s\n", pool)
		}
		name := strings.TrimPrefix(j.task, "crm.")
		fmt.Fprintf(&routes, "  - {name: %s, methods: [POST], path: /v1/crm/%s, enqueue: {task: %s}}\n", name, name, j.task)
	}
	cfg := configHead("postgres", dbURL, redisURL) + fmt.Sprintf(`tenants:
  - {name: acme, api_key_sha256: [%q]}
%sjobs:
%sroutes:
%sworker:
  admin_listen: "127.0.0.1:0"
  concurrency: 4
  queues: {%s: 1}
  lock_ttl: 5s
  shutdown_timeout: 5s
`, sha("acme-key"), fairness.String(), jobs.String(), routes.String(), queue)
	return writeFile(t, "debounce.yaml", cfg)
}

// TestDebounceEndToEnd submits debounced jobs through a real gateway and
// worker, Redis and PostgreSQL: bursts fold into one delivery with the
// right body, every key of a burst replays its job, a steady stream is
// cut off at max_delay, a cancel or a worker's take ends a cycle.
func TestDebounceEndToEnd(t *testing.T) { debounceEndToEnd(t, "") }

// TestDebounceInFairnessPool is TestDebounceEndToEnd with the debounced
// jobs in a fairness pool: each version waits in the pool, and once every
// job has run the pool holds nothing, in flight or waiting.
func TestDebounceInFairnessPool(t *testing.T) {
	fair := "crm" + randomID()
	g := debounceEndToEnd(t, fair)
	if doc := fairPool(t, g, fair); doc.InFlight != 0 || len(doc.Tenants) != 0 {
		t.Errorf("the pool after every job ran: %+v; want nothing in flight or waiting", doc)
	}
}

// fairPoolDoc is what GET /admin/fairness/{pool} answers.
type fairPoolDoc struct {
	InFlight int `json:"in_flight"`
	Tenants  []struct {
		Tenant   string `json:"tenant"`
		Ready    int    `json:"ready"`
		Delayed  int    `json:"delayed"`
		InFlight int    `json:"in_flight"`
	} `json:"tenants"`
}

// fairPool reads the fairness pool name through g's admin API.
func fairPool(t *testing.T, g *gatewayProc, name string) fairPoolDoc {
	t.Helper()
	r := adminDo(t, g, http.MethodGet, "/admin/fairness/"+name, adminToken)
	var doc fairPoolDoc
	if err := json.Unmarshal(r.body, &doc); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET the pool %s: %d %s %v", name, r.status, r.body, err)
	}
	return doc
}

// debounceEndToEnd runs the debounce story, with the jobs in the
// fairness pool fair unless it is "", and returns the gateway.
func debounceEndToEnd(t *testing.T, fair string) *gatewayProc {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	rcv := &syncReceiver{got: map[string][]int{}, release: make(chan struct{})}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(rcv.release) })
	cfg := debounceConfig(t, dbURL, redisURL, srv.URL+"/hooks/crm", "deb"+randomID(), fair)
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	run := randomID()

	submit := func(route, key, account string, rev int) debounceDoc {
		t.Helper()
		r := send(t, g.public, req{path: "/v1/crm/" + route, key: key, apiKey: "acme-key",
			body: fmt.Sprintf(`{"account_id": %q, "rev": %d}`, account, rev)})
		if r.status != http.StatusAccepted {
			t.Fatalf("submit %s: %d %s", key, r.status, r.body)
		}
		return decodeDoc[debounceDoc](t, r)
	}
	get := func(id string) debounceDoc {
		t.Helper()
		r := getJob(t, g.public, id, "acme-key")
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, r.status, r.body)
		}
		return decodeDoc[debounceDoc](t, r)
	}
	await := func(id, status string) debounceDoc {
		t.Helper()
		var d debounceDoc
		testkit.Eventually(t, "job "+id+" "+status, 90*time.Second, func() bool { d = get(id); return d.Status == status })
		return d
	}

	t.Run("a burst of 40 is one delivery of the last body", func(t *testing.T) {
		account := "a-" + run
		ids := map[string]bool{}
		var first debounceDoc
		for i := 1; i <= 40; i++ {
			d := submit("sync", fmt.Sprintf("burst-%s-%d", run, i), account, i)
			ids[d.ID] = true
			if i == 1 {
				first = d
			}
		}
		if len(ids) != 1 {
			t.Fatalf("40 submits made %d jobs; want one", len(ids))
		}
		if fair != "" {
			// The job waits in the pool for its due time, outside the
			// window.
			doc := fairPool(t, g, fair)
			if len(doc.Tenants) != 1 || doc.Tenants[0].Delayed < 1 || doc.InFlight != 0 {
				t.Errorf("the pool while the burst's job waits: %+v; want acme's job delayed, nothing in flight", doc)
			}
		}
		done := await(first.ID, "succeeded")
		if got := rcv.delivered(account); len(got) != 1 || got[0] != 40 {
			t.Errorf("deliveries of the burst: revisions %v; want one, of revision 40", got)
		}
		if d := done.Debounce; d == nil || d.Coalesced != 40 || d.Key != "acme:"+account || d.Until.Sub(d.FirstAt) != time.Minute {
			t.Errorf("debounce of the job: %+v; want 40 coalesced under acme:%s, until first_at + 60s", d, account)
		}
		t.Logf("debounce: 40 submits under 40 keys → %d job, coalesced %d, %d delivery (revision %v)",
			len(ids), done.Debounce.Coalesced, len(rcv.delivered(account)), rcv.delivered(account))
		for i := 1; i <= 40; i++ {
			d := submit("sync", fmt.Sprintf("burst-%s-%d", run, i), account, i)
			if d.ID != first.ID {
				t.Fatalf("replay of key %d: job %s; want %s", i, d.ID, first.ID)
			}
		}
		if n := count(t, pool, `SELECT count(*) FROM jobs WHERE debounce_key = $1`, "acme:"+account); n != 1 {
			t.Errorf("the replays made %d jobs; want the one", n)
		}
		code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--job", first.ID)
		if code != 0 || !strings.Contains(out, "coalesced 40 submissions, first ") || !strings.Contains(out, ", ran at ") {
			t.Errorf("explain: %d %s %s; want the cycle told", code, out, errOut)
		}
		if got := rcv.delivered(account); len(got) != 1 {
			t.Errorf("deliveries after the replays: %v; want the one", got)
		}
	})

	t.Run("leading keeps the first body", func(t *testing.T) {
		account := "l-" + run
		var id string
		for i := 1; i <= 5; i++ {
			id = submit("lead", fmt.Sprintf("lead-%s-%d", run, i), account, i).ID
		}
		done := await(id, "succeeded")
		if got := rcv.delivered(account); len(got) != 1 || got[0] != 1 || done.Debounce.Coalesced != 5 {
			t.Errorf("leading: revisions %v, coalesced %d; want one delivery of revision 1, 5 coalesced", got, done.Debounce.Coalesced)
		}
	})

	t.Run("a steady stream is cut off at max_delay", func(t *testing.T) {
		account := "s-" + run
		firstID := submit("stream", fmt.Sprintf("stream-%s-1", run), account, 1).ID
		rev, next := 1, ""
		deadline := time.Now().Add(60 * time.Second)
		for next == "" {
			if time.Now().After(deadline) {
				t.Fatalf("a stream every 300ms for 60s stayed in one job; max_delay is 3s")
			}
			time.Sleep(300 * time.Millisecond)
			rev++
			if d := submit("stream", fmt.Sprintf("stream-%s-%d", run, rev), account, rev); d.ID != firstID {
				next = d.ID
			}
		}
		first := await(firstID, "succeeded")
		// The database's clock: when the job's first attempt started,
		// against its cap.
		var late float64
		if err := pool.QueryRow(context.Background(), `SELECT extract(epoch FROM min(a.started_at) - j.debounce_until)
  FROM jobs j JOIN job_attempts a ON a.job_id = j.id WHERE j.id = $1 GROUP BY j.debounce_until`, firstID).Scan(&late); err != nil {
			t.Fatal(err)
		}
		if late > 15 {
			t.Errorf("the first job started %.1fs after first_at + max_delay; want it started by then, give or take a loaded worker", late)
		}
		if first.Debounce.Until.Sub(first.Debounce.FirstAt) != 3*time.Second || first.Debounce.Coalesced >= rev {
			t.Errorf("first job: %+v; want until = first_at + 3s and fewer than %d submits", first.Debounce, rev)
		}
		got := rcv.delivered(account)
		if len(got) == 0 || got[0] >= rev {
			t.Errorf("stream deliveries: %v; want the first job's body from before the submit that started the next", got)
		}
		await(next, "succeeded")
		t.Logf("stream: %d submits every 300ms, the first job folded %d, started %.1fs after its cap; deliveries %v",
			rev, first.Debounce.Coalesced, late, rcv.delivered(account))
	})

	t.Run("a cancel ends the cycle", func(t *testing.T) {
		account := "c-" + run
		id := submit("sync", fmt.Sprintf("cancel-%s-1", run), account, 1).ID
		submit("sync", fmt.Sprintf("cancel-%s-2", run), account, 2)
		if r := cancelReq(t, g, id, "acme-key"); r.status != http.StatusOK {
			t.Fatalf("cancel: %d %s", r.status, r.body)
		}
		d := submit("sync", fmt.Sprintf("cancel-%s-3", run), account, 3)
		if d.ID == id || d.Debounce == nil || d.Debounce.Coalesced != 1 {
			t.Fatalf("the submit after the cancel: job %s %+v; want a new job, one submit", d.ID, d.Debounce)
		}
		await(d.ID, "succeeded")
		if got := rcv.delivered(account); len(got) != 1 || got[0] != 3 {
			t.Errorf("deliveries after the cancel: %v; want revision 3 only", got)
		}
		if c := get(id); c.Status != "cancelled" {
			t.Errorf("the cancelled job is %s", c.Status)
		}
	})

	t.Run("a job a worker took is not changed", func(t *testing.T) {
		account := "hold-" + run
		id := submit("stream", fmt.Sprintf("hold-%s-1", run), account, 1).ID
		testkit.Eventually(t, "the delivery held", 60*time.Second, func() bool { return len(rcv.delivered(account)) == 1 })
		d := submit("stream", fmt.Sprintf("hold-%s-2", run), account, 2)
		if d.ID == id || d.Debounce.Coalesced != 1 {
			t.Fatalf("a submit while the job ran: job %s %+v; want a new job", d.ID, d.Debounce)
		}
		var payload string
		if err := pool.QueryRow(context.Background(), `SELECT payload->>'rev' FROM jobs WHERE id = $1`, id).Scan(&payload); err != nil || payload != "1" {
			t.Errorf("the running job's body: rev %q, %v; want 1", payload, err)
		}
		rcv.release <- struct{}{}
		await(id, "succeeded")
		await(d.ID, "succeeded")
		if got := rcv.delivered(account); len(got) != 2 || got[0] != 1 || got[1] != 2 {
			t.Errorf("deliveries: %v; want revision 1, then 2", got)
		}
	})
	return g
}
