package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// A job declared in a fairness pool, submitted through the gateway, waits
// in the pool and is dispatched by the worker's dispatcher; the gateway's
// admin endpoint shows the pool and changes its weights.
func TestFairnessEndToEnd(t *testing.T) {
	dbURL := testkit.Postgres(t, exampleTables())
	pool := testkit.PoolAt(t, dbURL)
	schema, err := filepath.Abs("../../examples/schemas/invoice.create.json")
	if err != nil {
		t.Fatal(err)
	}
	queue := "fair" + randomID()
	cfg := writeFile(t, "fair.yaml", configHead("postgres", dbURL, testkit.RedisURL(t))+fmt.Sprintf(`tenants:
  - name: acme
    api_key_sha256: [%q]
  - name: bigco
    api_key_sha256: [%q]
fairness:
  - {name: tenants%[3]s, weights: {acme: 3}, window: 4}
jobs:
  - task: invoice.create
    queue: %[3]s
    schema_file: %[4]q
    business_key: "invoice:{order_id}"
    resource: "order:{order_id}"
    fairness: tenants%[3]s
routes:
  - {name: invoices, methods: [POST], path: /v1/invoices, enqueue: {task: invoice.create}}
worker:
  admin_listen: "127.0.0.1:0"
  concurrency: 4
  queues: {%[3]s: 1}
  lock_ttl: 5s
  shutdown_timeout: 10s
`, sha("acme-key"), sha("bigco-key"), queue, schema))
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	run := randomID()
	for i := range 30 {
		apiKey := "acme-key"
		if i%3 == 0 {
			apiKey = "bigco-key"
		}
		key := fmt.Sprintf("inv-%s-%d", run, i)
		r, err := sendErr(g.public, req{path: "/v1/invoices", key: key, apiKey: apiKey,
			body: fmt.Sprintf(`{"order_id":"o-%s-%d","amount_cents":100,"currency":"EUR"}`, run, i)})
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("%s: %v %d %s", key, err, r.status, r.body)
		}
	}
	testkit.Eventually(t, "every job succeeded", time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE status = 'succeeded' AND queue = $1`, queue) == 30
	})

	admin := func(method, body string) (int, map[string]any) {
		r, err := http.NewRequest(method, g.admin+"/admin/fairness/tenants"+queue, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer "+adminToken)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var doc map[string]any
		_ = json.Unmarshal(b, &doc)
		return res.StatusCode, doc
	}
	status, doc := admin(http.MethodGet, "")
	if status != http.StatusOK || doc["window"] != float64(4) || doc["in_flight"] != float64(0) || len(doc["tenants"].([]any)) != 0 {
		t.Errorf("GET the pool after every job ran: %d %v; want window 4, nothing in flight or waiting", status, doc)
	}
	status, doc = admin(http.MethodPut, `{"default_weight": 2, "weights": {"bigco": 5}}`)
	if w, _ := doc["weights"].(map[string]any); status != http.StatusOK || w["bigco"] != float64(5) || doc["default_weight"] != float64(2) {
		t.Errorf("PUT weights: %d %v", status, doc)
	}
}
