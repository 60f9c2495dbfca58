package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// `idemgate explain --batch` shows a batch of any tenant: its jobs counted
// by status and each job with its key, as text or one JSON document; an
// unknown batch is an error.
func TestExplainBatch(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	queue, _, qname := testkit.Queue(t, "explainbatch")
	cfg := flowConfig(t, dbURL, redisURL, "http://127.0.0.1:1", qname)
	spec, err := job.NewSpec("email.send", []byte(`{"type":"object"}`), "email:{to}", "")
	if err != nil {
		t.Fatal(err)
	}
	b := job.Batch{Tenant: "acme", Route: "emails:batch", Key: "import-1", Items: 3}
	for i := range 3 {
		b.Requests = append(b.Requests, job.Request{Tenant: "acme", Route: "emails", Key: fmt.Sprintf("e-%d", i), Spec: spec, Queue: qname,
			Body: fmt.Appendf(nil, `{"to":"%d@example.com"}`, i)})
	}
	recs, err := job.NewSubmitter(pool, queue).SubmitBatch(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if err := job.NewStore(pool).SetStatus(t.Context(), recs[1].ID, job.StatusSucceeded, 1, "", ""); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--batch", b.ID())
	if code != 0 || !strings.Contains(out, "batch "+b.ID()+" of tenant acme") || !strings.Contains(out, "queued      2") ||
		!strings.Contains(out, "succeeded   1") || !strings.Contains(out, recs[1].ID+"  succeeded  attempts 1  key e-1") {
		t.Errorf("explain --batch: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, nil, "explain", "--config", cfg, "--batch", b.ID(), "--json")
	// The fields of the JSON document a script reads.
	var doc struct {
		Tenant string         `json:"tenant"`
		Items  int            `json:"items"`
		Counts map[string]int `json:"counts"`
		Final  bool           `json:"final"`
		Jobs   []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Tenant != "acme" || doc.Items != 3 || len(doc.Jobs) != 3 ||
		doc.Jobs[0].ID != recs[0].ID || doc.Counts["queued"] != 2 || doc.Final {
		t.Errorf("explain --batch --json: %d %v\n%s%s", code, err, out, errOut)
	}
	if code, _, errOut := cli(t, nil, "explain", "--config", cfg, "--batch", "bat_0"); code != 1 || !strings.Contains(errOut, `no batch "bat_0"`) {
		t.Errorf("an unknown batch: %d %s", code, errOut)
	}
	if code, _, errOut := cli(t, nil, "explain", "--config", cfg, "--batch", "bat_0", "--job", "j"); code != 2 || !strings.Contains(errOut, "--batch takes one batch id, alone") {
		t.Errorf("--batch with --job: %d %s", code, errOut)
	}
}
