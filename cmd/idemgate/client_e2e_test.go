package main

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/openapi"
	apiclient "github.com/idemgate/idemgate/openapi/client"
	"github.com/idemgate/idemgate/openapi/openapitest"
)

// TestGeneratedClientEndToEnd drives a real gateway and a real worker
// (PostgreSQL, Redis) with the client generated from openapi.yaml: an
// invoice submitted twice with one Idempotency-Key is one job, the second
// answer is its replay, and the job read back through the client ends
// succeeded with the invoice it made. Every answer is checked against
// openapi.yaml.
func TestGeneratedClientEndToEnd(t *testing.T) {
	dbURL, redisURL := testenv.Postgres(t), testenv.RedisURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// invoice.create calls no partner: nothing listens at the partner URL.
	cfg := flowConfig(t, dbURL, redisURL, "http://127.0.0.1:1", "client"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	spec, err := openapitest.NewValidator(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, resp *http.Response, body []byte) {
		t.Helper()
		if err := spec.Validate(t.Context(), resp, body); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	c, err := apiclient.NewClientWithResponses(g.public, apiclient.WithHTTPClient(hc),
		apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer acme-key")
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}

	ctx := t.Context()
	run := randomID()
	key := "client-" + run
	params := &openapi.CreateInvoiceParams{IdempotencyKey: key}
	invoice := openapi.InvoiceCreate{OrderId: "order-" + run, AmountCents: 4200, Currency: "EUR"}
	wantID := enqueue.JobID("acme", "invoices", key)

	first, err := c.CreateInvoiceWithResponse(ctx, params, invoice)
	if err != nil {
		t.Fatal(err)
	}
	check("submit", first.HTTPResponse, first.Body)
	if first.StatusCode() != http.StatusAccepted || first.JSON202 == nil || first.Headers202 == nil {
		t.Fatalf("submit: %d %s", first.StatusCode(), first.Body)
	}
	job := *first.JSON202
	if job.Id != wantID || job.Task != openapi.JobTaskInvoiceCreate || job.Status != openapi.JobStatusQueued ||
		job.Attempts != 0 || job.ResultRef != nil || job.Error != nil {
		t.Errorf("submit: job %+v, want %s queued", job, wantID)
	}
	if h := first.Headers202; h.Location != "/v1/jobs/"+wantID || h.IdempotentReplayed != nil {
		t.Errorf("submit: Location %q, Idempotent-Replayed %v; want /v1/jobs/%s and no replay", h.Location, h.IdempotentReplayed, wantID)
	}

	// The client retries: the same key and body get the stored answer.
	again, err := c.CreateInvoiceWithResponse(ctx, params, invoice)
	if err != nil {
		t.Fatal(err)
	}
	check("retry", again.HTTPResponse, again.Body)
	if again.StatusCode() != http.StatusAccepted || again.JSON202 == nil || again.Headers202 == nil {
		t.Fatalf("retry: %d %s", again.StatusCode(), again.Body)
	}
	if again.JSON202.Id != job.Id {
		t.Errorf("retry: job %s, want the first one's, %s", again.JSON202.Id, job.Id)
	}
	if r := again.Headers202.IdempotentReplayed; r == nil || *r != "true" {
		t.Errorf("retry: Idempotent-Replayed %v, want true", r)
	}
	if !bytes.Equal(again.Body, first.Body) {
		t.Errorf("retry: body\n%s\nwant the first answer\n%s", again.Body, first.Body)
	}

	// The worker runs it; the client follows Location until it is done.
	var done openapi.Job
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := c.GetJobWithResponse(ctx, job.Id, nil)
		if err != nil {
			t.Fatal(err)
		}
		check("get", got.HTTPResponse, got.Body)
		if got.JSON200 == nil {
			t.Fatalf("get: %d %s", got.StatusCode(), got.Body)
		}
		if cc := got.Headers200; cc == nil || cc.CacheControl == nil || *cc.CacheControl != "no-store" {
			t.Errorf("get: Cache-Control %+v, want no-store", got.Headers200)
		}
		done = *got.JSON200
		if done.Status == openapi.JobStatusSucceeded || done.Status == openapi.JobStatusFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still %s after 2m: %s", done.Status, got.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if done.Id != job.Id || done.Task != job.Task || done.Status != openapi.JobStatusSucceeded || done.Attempts < 1 ||
		done.Error != nil || done.ResultRef == nil || !done.CreatedAt.Equal(job.CreatedAt) || done.UpdatedAt.Before(done.CreatedAt) {
		t.Fatalf("finished job %+v, want %s succeeded with a result_ref", done, job.Id)
	}
	var invoiceID string
	var n int
	if err := pool.QueryRow(ctx, `SELECT min(id), count(*) FROM invoices WHERE order_id = $1`, invoice.OrderId).Scan(&invoiceID, &n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || invoiceID != *done.ResultRef {
		t.Errorf("%d invoices for %s, the first %q; want one, named by result_ref %q", n, invoice.OrderId, invoiceID, *done.ResultRef)
	}
}
