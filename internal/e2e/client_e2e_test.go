package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
	apiclient "github.com/idemgate/idemgate/openapi/apiclient"
)

// TestGeneratedClientEndToEnd drives a real gateway and a real worker
// (PostgreSQL, Redis): an invoice submitted twice with one
// Idempotency-Key is one job, the second answer is its replay, and the job
// read back through the client generated from openapi.yaml ends succeeded
// with the invoice it made. Every answer is checked against the document
// the gateway serves, which describes its configured enqueue routes.
func TestGeneratedClientEndToEnd(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	// invoice.create calls no partner: nothing listens at the partner URL.
	cfg := flowConfig(t, dbURL, redisURL, "http://127.0.0.1:1", "client"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	served, err := http.Get(g.public + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	servedDoc, err := io.ReadAll(served.Body)
	served.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(servedDoc)
	if err != nil {
		t.Fatalf("GET /openapi.json: %v", err)
	}
	if doc.Paths.Value("/v1/invoices") == nil || doc.Paths.Value("/v1/invoices").Post == nil {
		t.Fatal("the served document does not describe the configured route POST /v1/invoices")
	}
	spec, err := gatewaytest.NewValidator(t.Context(), doc)
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
	orderID := "order-" + run
	body := `{"order_id": "` + orderID + `", "amount_cents": 4200, "currency": "EUR"}`
	wantID := job.ID("acme", "invoices", key)
	submit := func(what string) (openapi.Job, *http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.public+"/v1/invoices", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer acme-key")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		if route, params, err := spec.Route(req); err != nil {
			t.Errorf("%s: the served document has no operation for the request: %v", what, err)
		} else if err := openapi3filter.ValidateRequest(ctx, &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		}); err != nil {
			t.Errorf("%s: the request does not follow the served document: %v", what, err)
		}
		req.Body = io.NopCloser(strings.NewReader(body)) // the validation read it
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		check(what, resp, b)
		var j openapi.Job
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &j) != nil {
			t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
		}
		return j, resp, b
	}
	job, firstResp, firstBody := submit("submit")
	if job.Id != wantID || job.Task != "invoice.create" || job.Status != openapi.JobStatusQueued ||
		job.Attempts != 0 || job.ResultRef != nil || job.Error != nil {
		t.Errorf("submit: job %+v, want %s queued", job, wantID)
	}
	if loc := firstResp.Header.Get("Location"); loc != "/v1/jobs/"+wantID || firstResp.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("submit: Location %q, Idempotent-Replayed %q; want /v1/jobs/%s and no replay", loc, firstResp.Header.Get("Idempotent-Replayed"), wantID)
	}

	// The client retries: the same key and body get the stored answer.
	again, againResp, againBody := submit("retry")
	if again.Id != job.Id {
		t.Errorf("retry: job %s, want the first one's, %s", again.Id, job.Id)
	}
	if r := againResp.Header.Get("Idempotent-Replayed"); r != "true" {
		t.Errorf("retry: Idempotent-Replayed %q, want true", r)
	}
	if !bytes.Equal(againBody, firstBody) {
		t.Errorf("retry: body\n%s\nwant the first answer\n%s", againBody, firstBody)
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
	if err := pool.QueryRow(ctx, `SELECT min(id), count(*) FROM invoices WHERE tenant = 'acme' AND order_id = $1`, orderID).Scan(&invoiceID, &n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || invoiceID != *done.ResultRef {
		t.Errorf("%d invoices for %s, the first %q; want one, named by result_ref %q", n, orderID, invoiceID, *done.ResultRef)
	}
}
