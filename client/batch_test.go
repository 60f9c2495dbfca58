package client_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemgate/idemgate/client"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
)

// SubmitBatch against a real gateway (PostgreSQL, Redis): the items'
// jobs are those single submits with their keys name, a refused item
// carries its problem, a retry replays the batch, an atomic batch with a
// bad item is a batch-refused error, and GetBatch counts the jobs.
func TestSubmitBatch(t *testing.T) {
	pool := testkit.Pool(t)
	queue, _, qname := testkit.Queue(t, "sdkbatch")
	spec, err := job.NewSpec("email.send", []byte(`{"type":"object","required":["to"],"properties":{"to":{"type":"string"}}}`), "email:{to}", "")
	if err != nil {
		t.Fatal(err)
	}
	store := pgstore.New(pool)
	t.Cleanup(store.Close)
	sum := sha256.Sum256([]byte("acme-key"))
	g, err := gateway.New(gateway.Options{
		Auth:   auth.Config{Mode: auth.ModeAPIKey, Tenants: []auth.TenantKeys{{Name: "acme", APIKeySHA256s: []string{hex.EncodeToString(sum[:])}}}},
		Store:  store,
		Jobs:   job.NewSubmitter(pool, queue),
		Logger: slog.New(slog.DiscardHandler),
		Routes: []gateway.RouteOptions{{Name: "emails", Methods: []string{http.MethodPost}, Path: "/v1/emails",
			Enqueue: &gateway.EnqueueOptions{Spec: spec, Queue: qname, Batch: &gateway.BatchOptions{Path: "/v1/emails:batch", MaxItems: 10}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() { srv.Close(); _ = g.Close(t.Context()) })
	c := client.New(srv.URL, client.WithAPIKey("acme-key"))
	run := testkit.Prefix()

	items := []client.BatchItem{
		{Key: run + "1", Payload: map[string]string{"to": "a@example.com"}},
		{Key: run + "2", Payload: map[string]string{"to": "b@example.com"}, Delay: time.Hour},
		{Key: run + "3", Payload: map[string]int{"to": 3}},
	}
	res, err := c.SubmitBatch(t.Context(), "/v1/emails:batch", items, false, client.WithKey(run+"batch"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts.Accepted != 2 || res.Counts.Rejected != 1 || len(res.Items) != 3 {
		t.Fatalf("result %+v", res)
	}
	if j := res.Items[1].Job; j == nil || j.Id != job.ID("acme", "emails", run+"2") || j.NotBefore == nil || j.Status != "scheduled" {
		t.Errorf("item 1: %+v, want the scheduled job of its key", res.Items[1].Job)
	}
	if p := res.Items[2].Problem; res.Items[2].Status != 422 || p == nil || p.Type != "https://idemgate.dev/problems/invalid-payload" {
		t.Errorf("item 2: %d %+v, want 422 invalid-payload", res.Items[2].Status, p)
	}
	// A single submit with an item's key names the item's job.
	one, err := c.SubmitJob(t.Context(), "/v1/emails", map[string]string{"to": "a@example.com"}, client.WithKey(run+"1"))
	if err != nil || one.Id != res.Items[0].Job.Id {
		t.Errorf("SubmitJob with item 0's key: %+v, %v; want job %s", one, err, res.Items[0].Job.Id)
	}
	again, err := c.SubmitBatch(t.Context(), "/v1/emails:batch", items, false, client.WithKey(run+"batch"))
	if err != nil || again.BatchId != res.BatchId || again.Items[0].Job.Id != res.Items[0].Job.Id {
		t.Errorf("retried batch: %+v, %v", again, err)
	}
	_, err = c.SubmitBatch(t.Context(), "/v1/emails:batch", []client.BatchItem{
		{Key: run + "4", Payload: map[string]string{"to": "d@example.com"}},
		{Key: run + "5", Payload: map[string]int{"to": 5}},
	}, true, client.WithKey(run+"atomic"))
	var pe *client.ProblemError
	if !errors.As(err, &pe) || pe.Slug() != "batch-refused" || len(pe.Errors) != 1 || pe.Errors[0].Field != "/items/1" {
		t.Errorf("atomic batch with a bad item: %v, want batch-refused naming /items/1", err)
	}
	st, err := c.GetBatch(t.Context(), res.BatchId, 0)
	if err != nil || st.Items != 3 || st.Accepted != 2 || st.Counts["queued"] != 1 || st.Counts["scheduled"] != 1 || st.Final {
		t.Errorf("GetBatch: %+v, %v", st, err)
	}
}
