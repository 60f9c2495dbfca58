package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/workers/limit"
)

// TestLimitsAdminEndpoint runs `idemgate serve` with a declared limit and
// reads it back on the admin listener while a worker would hold a slot.
func TestLimitsAdminEndpoint(t *testing.T) {
	t.Parallel()
	redisURL := testenv.RedisURL(t)
	// The workers' keys have no prefix: a name of this test's own keeps
	// it apart from others on the shared Redis.
	name := "ship-" + strings.ToLower(strings.Trim(testenv.Prefix(), ":"))
	name = strings.ReplaceAll(name, ":", "-")
	cfg := writeConfig(t, "memory", "", redisURL, "http://127.0.0.1:1",
		"limits:\n  - {name: "+name+", concurrency: 4, rate: 20/1s}\n")
	g := startGateway(t, cfg)

	held, err := limit.New(testenv.Redis(t), limit.Options{}).Take(t.Context(), "job_1#a", time.Minute,
		[]limit.Rule{{Name: name, Value: "acme", Concurrency: 4, Rate: 20, Period: time.Second, Burst: 1}})
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
