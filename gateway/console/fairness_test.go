package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// fairPool declares the pool "tenants" on rdb (acme weighs 3, initech
// 2, anyone else 1) for the job fair.console.
func fairPool(t *testing.T, rdb redis.UniversalClient) (*job.Fairness, *job.Spec) {
	t.Helper()
	spec, err := job.NewSpec("fair.console", []byte(`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`), "{id}", "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Fairness = "tenants"
	fair, err := job.NewFairness(rdb, []job.FairPool{{Name: "tenants", DefaultWeight: 1, Weights: map[string]float64{"acme": 3, "initech": 2}, Window: 16}}, []*job.Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	fair.Prefix = testkit.Prefix()
	return fair, spec
}

// TestFairnessPages: the fairness list links each declared pool; a
// pool's page shows each tenant's weight, jobs waiting and share of the
// dispatches, as GET /admin/fairness/{pool} reads them; an unknown pool
// is the console's 404.
func TestFairnessPages(t *testing.T) {
	rdb := testkit.Redis(t)
	fair, spec := fairPool(t, rdb)
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), fair.Prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"}) // pooled jobs wait in the pool
	t.Cleanup(func() { _ = client.Close() })
	sub := job.NewSubmitter(testkit.Pool(t), client)
	sub.Fairness = fair
	for _, j := range []struct{ tenant, id string }{{"acme", "1"}, {"acme", "2"}, {"acme", "3"}, {"globex", "4"}} {
		if _, err := sub.Submit(t.Context(), job.Request{Tenant: j.tenant, Route: "r", Key: j.id, Spec: spec, Body: []byte(`{"id":"` + j.id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	v := setupWith(t, func(o *console.Options) { o.Fairness = fair })

	doc := v.page(t, "/admin/ui/fairness")
	if attrOf(byID(doc, "fairness-link"), "href") != "/admin/ui/fairness" {
		t.Error("the nav has no fairness link")
	}
	pools := find(byID(doc, "pools"), func(n *html.Node) bool { return hasClass(n, "pool-link") })
	if len(pools) != 1 || attrOf(pools[0], "href") != "/admin/ui/fairness/tenants" {
		t.Fatalf("the pools listed: %d, want a link to tenants", len(pools))
	}

	doc = v.page(t, "/admin/ui/fairness/tenants")
	got := map[string]string{}
	for _, row := range find(byID(doc, "fair-tenants"), func(n *html.Node) bool { return hasClass(n, "fair-tenant") }) {
		var cols []string
		for _, c := range []string{"weight", "ready", "delayed", "in-flight", "share"} {
			cols = append(cols, text(cell(row, c)))
		}
		got[attrOf(row, "data-tenant")] = strings.Join(cols, " ")
	}
	want := map[string]string{
		"acme":    "3 3 0 0 75%",
		"globex":  "1 1 0 0 25%",
		"initech": "2 0 0 0 —",
	}
	if len(got) != len(want) {
		t.Errorf("the pool's tenants: %v, want %v", got, want)
	}
	for tenant, w := range want {
		if got[tenant] != w {
			t.Errorf("%s: weight, ready, delayed, in flight, share = %q, want %q", tenant, got[tenant], w)
		}
	}
	if text(byID(doc, "pool-in-flight")) != "0" {
		t.Errorf("jobs in flight: %q, want 0", text(byID(doc, "pool-in-flight")))
	}

	resp, body := v.adminDo(t, http.MethodGet, "/admin/ui/fairness/others")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "No fairness pool others") || !strings.Contains(body, `id="flash"`) {
		t.Errorf("an unknown pool: %d, want the console's 404 page\n%s", resp.StatusCode, body)
	}
}

// Without pools the list says none is declared and any pool is a 404;
// with Redis down a pool's page shows its configured weights and says
// the backlog could not be read.
func TestFairnessWithoutPoolsOrRedis(t *testing.T) {
	v := setup(t)
	if got := text(byID(v.page(t, "/admin/ui/fairness"), "no-pools")); !strings.Contains(got, "No fairness pool is declared") {
		t.Errorf("the list without pools: %q", got)
	}
	if resp, _ := v.adminDo(t, http.MethodGet, "/admin/ui/fairness/tenants"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a pool without pools: %d, want 404", resp.StatusCode)
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	fair, _ := fairPool(t, down)
	v = setupWith(t, func(o *console.Options) { o.Fairness = fair })
	doc := v.page(t, "/admin/ui/fairness/tenants")
	if got := text(byID(doc, "unreadable")); !strings.Contains(got, "could not be read") {
		t.Errorf("the pool with Redis down: %q, want it to say so", got)
	}
	acme := find(byID(doc, "fair-tenants"), func(n *html.Node) bool { return attrOf(n, "data-tenant") == "acme" })
	if len(acme) != 1 || text(cell(acme[0], "weight")) != "3" {
		t.Error("the pool with Redis down does not show acme's configured weight")
	}
	if len(find(v.page(t, "/admin/ui/fairness"), func(n *html.Node) bool { return hasClass(n, "pool-link") })) != 1 {
		t.Error("the list with Redis down does not list the pool")
	}
}

// A pool's page shows, beside the computed share, the share of the
// dispatches and the dwell its dispatcher measured: the first 16
// dispatches of tenants weighted 3:1, both backlogged, go 12 to acme and
// 4 to globex.
func TestFairnessMeasuredColumns(t *testing.T) {
	rdb := testkit.Redis(t)
	fair, spec := fairPool(t, rdb)
	fair.Poll = 20 * time.Millisecond
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), fair.Prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	client, inspector, queue := testkit.Queue(t, "fairview")
	spec.Queue = queue
	sub := job.NewSubmitter(testkit.Pool(t), client)
	sub.Fairness = fair
	for _, tenant := range []string{"acme", "globex"} {
		for i := range 20 {
			id := fmt.Sprintf("%s-%d", tenant, i)
			if _, err := sub.Submit(t.Context(), job.Request{Tenant: tenant, Route: "r", Key: id, Spec: spec, Body: []byte(`{"id":"` + id + `"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// No worker takes the tasks: the window (16) fills, then nothing moves.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = fair.Run(ctx, sub, inspector) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, inFlight, err := fair.Backlog(t.Context(), "tenants")
		if err != nil {
			t.Fatal(err)
		}
		if inFlight == 16 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs in flight; want the window's 16", inFlight)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()

	v := setupWith(t, func(o *console.Options) { o.Fairness = fair })
	doc := v.page(t, "/admin/ui/fairness/tenants")
	for _, h := range []string{"Share of dispatches (computed)", "Measured share (5 min)", "Dwell mean / p99 (5 min)", "Measured share (60 min)"} {
		if len(find(byID(doc, "fair-tenants"), func(n *html.Node) bool { return n.Data == "th" && text(n) == h })) != 1 {
			t.Errorf("the pool's table has no column %q", h)
		}
	}
	rows := map[string]*html.Node{}
	for _, row := range find(byID(doc, "fair-tenants"), func(n *html.Node) bool { return hasClass(n, "fair-tenant") }) {
		rows[attrOf(row, "data-tenant")] = row
	}
	for tenant, want := range map[string]string{"acme": "75% 75%", "globex": "25% 25%", "initech": "— —"} {
		row := rows[tenant]
		if row == nil {
			t.Errorf("no row for %s", tenant)
			continue
		}
		if got := text(cell(row, "measured-share")) + " " + text(cell(row, "measured-share-hour")); got != want {
			t.Errorf("%s: measured share 5 min, 60 min = %q, want %q", tenant, got, want)
		}
		dwell := text(cell(row, "dwell"))
		if tenant == "initech" && dwell != "—" || tenant != "initech" && !strings.Contains(dwell, " / ≤ ") {
			t.Errorf("%s: dwell %q, want a mean and a p99 bound (— for a tenant never dispatched)", tenant, dwell)
		}
	}
	if got := text(find(doc, func(n *html.Node) bool { return hasClass(n, "note") && strings.Contains(text(n), "Measured share is") })[0]); !strings.Contains(got, "computed") {
		t.Errorf("the page does not tell the computed share from the measured one: %q", got)
	}
}
