package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/flowlimit"
)

// TestLimitsAdminEndpoint runs `idemgate serve` with a declared limit and
// reads it back on the admin listener while a worker would hold a slot.
func TestLimitsAdminEndpoint(t *testing.T) {
	t.Parallel()
	redisURL := testkit.RedisURL(t)
	// The workers' keys have no prefix: a name of this test's own keeps
	// it apart from others on the shared Redis.
	name := "ship-" + strings.ToLower(strings.Trim(testkit.Prefix(), ":"))
	name = strings.ReplaceAll(name, ":", "-")
	cfg := writeConfig(t, "memory", "", redisURL, "http://127.0.0.1:1",
		"limits:\n  - {name: "+name+", concurrency: 4, rate: 20/1s}\n")
	g := startGateway(t, cfg)

	held, err := flowlimit.New(testkit.Redis(t), flowlimit.Options{}).Take(t.Context(), "job_1#a", time.Minute,
		[]flowlimit.Rule{{Name: name, Value: "acme", Concurrency: 4, Rate: 20, Period: time.Second, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(t.Context()) })

	r := adminDo(t, g, "GET", "/admin/limits/"+name, adminToken)
	var doc struct {
		Name        string
		Concurrency int
		Rate        string
		Burst       int
		Values      []struct {
			Value   string
			Held    int
			Holders []string
		}
	}
	if err := json.Unmarshal(r.body, &doc); err != nil || r.status != 200 {
		t.Fatalf("GET /admin/limits/%s: %d %s", name, r.status, r.body)
	}
	if doc.Name != name || doc.Concurrency != 4 || doc.Rate != "20/1s" || doc.Burst != 1 ||
		len(doc.Values) != 1 || doc.Values[0].Value != "acme" || doc.Values[0].Held != 1 || doc.Values[0].Holders[0] != "job_1#a" {
		t.Errorf("GET /admin/limits/%s = %s", name, r.body)
	}
	if r := adminDo(t, g, "GET", "/admin/limits/nope", adminToken); r.status != 404 || r.problemType(t) != "not-found" {
		t.Errorf("an unknown limit: %d %s", r.status, r.body)
	}
}

// TestLimitsEndToEnd declares a limit in the configuration file and runs
// jobs through `idemgate serve` and `idemgate worker`: the receiver, by its
// own clock, sees one call at a time, spaced by the rate, and every job
// succeeds at its first attempt.
func TestLimitsEndToEnd(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	var (
		mu             sync.Mutex
		starts         []time.Time
		inFlight, peak int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		starts = append(starts, time.Now())
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	name := "ship-" + randomID()
	path := deliverConfig(t, dbURL, redisURL, srv.URL+"/hooks/shipments", "lim"+randomID())
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(b), "    max_attempts: 5\n", "    max_attempts: 5\n    limits: [{use: "+name+", key: \"{tenant}\"}]\n", 1)
	doc += "limits:\n  - {name: " + name + ", concurrency: 1, rate: 4/1s}\n"
	cfg := writeFile(t, "limits.yaml", doc)
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	const jobs = 6
	var ids []string
	for i := range jobs {
		ids = append(ids, submitShipment(t, g, fmt.Sprintf("lim-%d", i), fmt.Sprintf(`{"order_id": "o-%d", "quantity": 1}`, i)))
	}
	for _, id := range ids {
		var j jobDoc
		testkit.Eventually(t, "job "+id+" succeeded", time.Minute, func() bool {
			j = decodeJob(t, getJob(t, g.public, id, "acme-key"))
			return j.Status == "succeeded"
		})
		if j.Attempts != 1 {
			t.Errorf("job %s: %d attempts, want 1: a limit's wait is not an attempt", id, j.Attempts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != jobs || peak != 1 {
		t.Errorf("the receiver got %d calls, %d at once; want %d, one at a time", len(starts), peak, jobs)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// Five intervals of 250ms at least, less a tolerance for the network.
	if span := starts[len(starts)-1].Sub(starts[0]); span < time.Second {
		t.Errorf("%d calls within %s; at 4/s they take at least 1.25s", jobs, span)
	}
	if r := adminDo(t, g, "GET", "/admin/limits/"+name, adminToken); r.status != 200 || !strings.Contains(string(r.body), `"value": "acme"`) {
		t.Errorf("GET /admin/limits/%s: %d %s", name, r.status, r.body)
	}
}
