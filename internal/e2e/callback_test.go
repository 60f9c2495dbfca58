package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/receiver"
)

// callbackPost is one final-status callback the test receiver got.
type callbackPost struct {
	id, tenant string
	body       []byte
	verified   bool
}

// TestFinalCallbackEndToEnd: a job declared with on_final, run by a real
// `idemgate worker` behind a real gateway: its receiver fails the first
// POST and gets the second, both signed, under one webhook-id, carrying
// the document GET /v1/jobs/{id} shows and the job's tenant (in the data
// and in Idemgate-Tenant); explain shows both attempts.
func TestFinalCallbackEndToEnd(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	deliveries := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/shipments/1")
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(deliveries.Close)
	v, err := receiver.NewVerifier(webhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var posts []callbackPost
	callbacks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, callbackPost{id: r.Header.Get("webhook-id"), tenant: r.Header.Get("Idemgate-Tenant"), body: body,
			verified: v.Verify(r.Header, body) == nil})
		n := len(posts)
		mu.Unlock()
		if n == 1 {
			http.Error(w, "down for a moment", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(callbacks.Close)

	base := deliverConfig(t, dbURL, redisURL, deliveries.URL+"/hooks/shipments", "cb"+randomID())
	text, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	withCallback := strings.Replace(string(text), "    max_attempts: 5\n",
		"    max_attempts: 5\n    on_final: {http: {url: \""+callbacks.URL+"/hooks/final\", secret: \""+webhookSecret+"\", timeout: 5s}}\n", 1)
	if withCallback == string(text) {
		t.Fatal("the on_final line was not added")
	}
	cfg := writeFile(t, "callback.yaml", withCallback)
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	id := submitShipment(t, g, "cb-1", `{"order_id": "o-cb", "quantity": 1}`)

	testkit.Eventually(t, "the callback delivered", 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(posts) >= 2
	})
	doc := getJob(t, g.public, id, "acme-key")
	mu.Lock()
	got := slices.Clone(posts)
	mu.Unlock()
	for i, p := range got {
		if p.id != id+":final" || !p.verified || p.tenant != "acme" {
			t.Errorf("POST %d: webhook-id %q, signature verified %v, Idemgate-Tenant %q; want %s:final, verified, acme", i+1, p.id, p.verified, p.tenant, id)
		}
		var ev struct {
			Type      string         `json:"type"`
			Timestamp string         `json:"timestamp"`
			Data      map[string]any `json:"data"`
		}
		if err := json.Unmarshal(p.body, &ev); err != nil {
			t.Fatalf("POST %d: %v\n%s", i+1, err, p.body)
		}
		var want map[string]any
		if err := json.Unmarshal(doc.body, &want); err != nil {
			t.Fatal(err)
		}
		want["tenant"] = "acme"
		if ev.Type != "job.succeeded" || !reflect.DeepEqual(ev.Data, want) {
			t.Errorf("POST %d: %s with data %v; want job.succeeded with the job document and its tenant %v", i+1, ev.Type, ev.Data, want)
		}
		if _, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err != nil || ev.Timestamp == "" {
			t.Errorf("POST %d: timestamp %q", i+1, ev.Timestamp)
		}
	}
	if len(got) != 2 {
		t.Errorf("%d POSTs, want 2 (one answered 500, one 204)", len(got))
	}

	var story struct {
		Callbacks []struct {
			WebhookID string `json:"webhook_id"`
			State     string `json:"state"`
			Tries     []struct {
				Status  *int   `json:"status"`
				Outcome string `json:"outcome"`
			} `json:"tries"`
		} `json:"callbacks"`
	}
	var cbs []byte
	testkit.Eventually(t, "explain shows the callback delivered", time.Minute, func() bool {
		_, out := explainJSON(t, cfg, "--job", id)
		cbs = []byte(out)
		if err := json.Unmarshal(cbs, &story); err != nil {
			t.Fatal(err)
		}
		return len(story.Callbacks) == 1 && story.Callbacks[0].State == "delivered"
	})
	c := story.Callbacks[0]
	if c.WebhookID != id+":final" || len(c.Tries) != 2 || c.Tries[0].Outcome != "retry" || *c.Tries[0].Status != 500 ||
		c.Tries[1].Outcome != "delivered" || *c.Tries[1].Status != 204 {
		t.Errorf("explain's callbacks: %s", cbs)
	}
	code, out, errOut := cli(t, nil, "explain", "--config", cfg, "--job", id)
	if code != 0 || !strings.Contains(out, "callbacks") || !strings.Contains(out, id+":final job.succeeded: delivered after 2 attempt(s)") {
		t.Errorf("explain: exit %d, want the callback's line:\n%s%s", code, out, errOut)
	}
}
