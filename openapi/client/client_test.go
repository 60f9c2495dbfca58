package client_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/openapi/client"
	"github.com/idemgate/idemgate/openapi/openapitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// target is the gateway the round trip runs against: an in-process one
// with a fake queue, or, with TEST_IDEMGATE_URL and TEST_IDEMGATE_API_KEY
// set, a running gateway whose workers run the jobs.
type target struct {
	url, apiKey string
	http        *http.Client
	// In process only.
	srv  *openapitest.Server
	jobs *openapitest.Jobs
}

func (tg target) real() bool { return tg.srv == nil }

func newTarget(t *testing.T) target {
	t.Helper()
	if u := os.Getenv("TEST_IDEMGATE_URL"); u != "" {
		key := os.Getenv("TEST_IDEMGATE_API_KEY")
		if key == "" {
			t.Fatal("TEST_IDEMGATE_URL is set without TEST_IDEMGATE_API_KEY")
		}
		c := &http.Client{Timeout: 30 * time.Second}
		t.Cleanup(c.CloseIdleConnections)
		return target{url: u, apiKey: key, http: c}
	}
	jobs := openapitest.NewJobs()
	srv := openapitest.Start(t, openapitest.Options(jobs, memstore.New()))
	return target{url: srv.Public.URL, apiKey: openapitest.APIKey, http: srv.Public.Client(), srv: srv, jobs: jobs}
}

func newClient(t *testing.T, base string, hc *http.Client, token string) *client.ClientWithResponses {
	t.Helper()
	c, err := client.NewClientWithResponses(base, client.WithHTTPClient(hc),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func unique(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// answer is what the round trip reads from any enqueue route's response.
type answer struct {
	status   int
	job      *openapi.Job
	location string
	replayed bool
	problem  *openapi.Problem
}

// routes submits one example payload per enqueue route; id makes its
// business identity unique, change alters the request.
var routes = []struct {
	name, task string
	submit     func(ctx context.Context, c *client.ClientWithResponses, key, id string, change bool) (answer, error)
}{
	{"invoices", enqueue.TaskInvoiceCreate, func(ctx context.Context, c *client.ClientWithResponses, key, id string, change bool) (answer, error) {
		body := openapi.InvoiceCreate{OrderId: "order-" + id, AmountCents: 4200, Currency: "EUR"}
		if change {
			body.AmountCents++
		}
		r, err := c.CreateInvoiceWithResponse(ctx, &openapi.CreateInvoiceParams{IdempotencyKey: key}, body)
		if err != nil {
			return answer{}, err
		}
		a := answer{status: r.StatusCode(), job: r.JSON202, problem: r.ApplicationproblemJSON422}
		if h := r.Headers202; h != nil {
			a.location, a.replayed = h.Location, h.IdempotentReplayed != nil && *h.IdempotentReplayed == "true"
		}
		return a, nil
	}},
	{"inventory", enqueue.TaskInventoryAdjust, func(ctx context.Context, c *client.ClientWithResponses, key, id string, change bool) (answer, error) {
		body := openapi.InventoryAdjust{AdjustmentId: "adj-" + id, Sku: "sku-" + id, Delta: 5}
		if change {
			body.Delta = -5
		}
		r, err := c.AdjustInventoryWithResponse(ctx, &openapi.AdjustInventoryParams{IdempotencyKey: key}, body)
		if err != nil {
			return answer{}, err
		}
		a := answer{status: r.StatusCode(), job: r.JSON202, problem: r.ApplicationproblemJSON422}
		if h := r.Headers202; h != nil {
			a.location, a.replayed = h.Location, h.IdempotentReplayed != nil && *h.IdempotentReplayed == "true"
		}
		return a, nil
	}},
	{"charges", enqueue.TaskPaymentCharge, func(ctx context.Context, c *client.ClientWithResponses, key, id string, change bool) (answer, error) {
		body := openapi.PaymentCharge{PaymentId: "pay-" + id, AmountCents: 1250, Currency: "EUR"}
		if change {
			body.Currency = "USD"
		}
		r, err := c.ChargePaymentWithResponse(ctx, &openapi.ChargePaymentParams{IdempotencyKey: key}, body)
		if err != nil {
			return answer{}, err
		}
		a := answer{status: r.StatusCode(), job: r.JSON202, problem: r.ApplicationproblemJSON422}
		if h := r.Headers202; h != nil {
			a.location, a.replayed = h.Location, h.IdempotentReplayed != nil && *h.IdempotentReplayed == "true"
		}
		return a, nil
	}},
	{"notifications", enqueue.TaskNotificationSend, func(ctx context.Context, c *client.ClientWithResponses, key, id string, change bool) (answer, error) {
		body := openapi.NotificationSend{EventId: "evt-" + id, UserId: "user-" + id, Template: "welcome"}
		if change {
			body.Template = "goodbye"
		}
		r, err := c.SendNotificationWithResponse(ctx, &openapi.SendNotificationParams{IdempotencyKey: key}, body)
		if err != nil {
			return answer{}, err
		}
		a := answer{status: r.StatusCode(), job: r.JSON202, problem: r.ApplicationproblemJSON422}
		if h := r.Headers202; h != nil {
			a.location, a.replayed = h.Location, h.IdempotentReplayed != nil && *h.IdempotentReplayed == "true"
		}
		return a, nil
	}},
}

// TestRoundTrip submits a job on each enqueue route with the generated
// client, submits it again (the same job), reads it back, and checks that
// the key cannot be reused for another request.
func TestRoundTrip(t *testing.T) {
	tg := newTarget(t)
	c := newClient(t, tg.url, tg.http, tg.apiKey)
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			ctx := t.Context()
			id := unique(t)
			key := "rt-" + id

			first, err := rt.submit(ctx, c, key, id, false)
			if err != nil {
				t.Fatal(err)
			}
			if first.status != http.StatusAccepted || first.job == nil {
				t.Fatalf("submit: status %d, job %v", first.status, first.job)
			}
			job := *first.job
			if string(job.Task) != rt.task || first.location != "/v1/jobs/"+job.Id || first.replayed {
				t.Errorf("submit: job %+v, Location %q, replayed %v", job, first.location, first.replayed)
			}

			// A retry, with the key in its quoted form: the same job.
			again, err := rt.submit(ctx, c, `"`+key+`"`, id, false)
			if err != nil {
				t.Fatal(err)
			}
			if again.status != http.StatusAccepted || again.job == nil || again.job.Id != job.Id || !again.replayed {
				t.Fatalf("retry: status %d, job %v, replayed %v; want job %s replayed", again.status, again.job, again.replayed, job.Id)
			}

			reused, err := rt.submit(ctx, c, key, id, true)
			if err != nil {
				t.Fatal(err)
			}
			if reused.status != http.StatusUnprocessableEntity || reused.problem == nil || !strings.HasSuffix(reused.problem.Type, "/idempotency-key-reused") {
				t.Errorf("same key, other request: status %d, problem %+v", reused.status, reused.problem)
			}

			got, err := c.GetJobWithResponse(ctx, job.Id, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.JSON200 == nil || got.JSON200.Id != job.Id || got.JSON200.Task != job.Task || !got.JSON200.CreatedAt.Equal(job.CreatedAt) {
				t.Fatalf("get: status %d, %s", got.StatusCode(), got.Body)
			}
			if got.Headers200 == nil || got.Headers200.CacheControl == nil || *got.Headers200.CacheControl != "no-store" {
				t.Errorf("get: headers %+v", got.Headers200)
			}

			if !tg.real() {
				// Play the worker.
				tg.jobs.Update(job.Id, func(j *enqueue.Job) {
					ref := "ref_" + id
					j.Status, j.Attempts, j.ResultRef = enqueue.StatusSucceeded, 1, &ref
				})
			}
			done := waitDone(t, c, job.Id)
			if done.Status != openapi.JobStatusSucceeded || done.ResultRef == nil || *done.ResultRef == "" || done.Attempts < 1 {
				t.Errorf("finished job %+v", done)
			}
		})
	}
}

// waitDone polls the job until it succeeded or failed.
func waitDone(t *testing.T, c *client.ClientWithResponses, id string) openapi.Job {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := c.GetJobWithResponse(t.Context(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.JSON200 == nil {
			t.Fatalf("get %s: status %d, %s", id, r.StatusCode(), r.Body)
		}
		if s := r.JSON200.Status; s == openapi.JobStatusSucceeded || s == openapi.JobStatusFailed || time.Now().After(deadline) {
			return *r.JSON200
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOtherTenantsJob: a job is not found for another tenant.
func TestOtherTenantsJob(t *testing.T) {
	tg := newTarget(t)
	other := os.Getenv("TEST_IDEMGATE_OTHER_API_KEY")
	if !tg.real() {
		other = openapitest.OtherAPIKey
	}
	if other == "" {
		t.Skip("TEST_IDEMGATE_OTHER_API_KEY names no second tenant")
	}
	id := unique(t)
	a, err := routes[0].submit(t.Context(), newClient(t, tg.url, tg.http, tg.apiKey), "tenant-"+id, id, false)
	if err != nil || a.job == nil {
		t.Fatalf("submit: %v, status %d", err, a.status)
	}
	r, err := newClient(t, tg.url, tg.http, other).GetJobWithResponse(t.Context(), a.job.Id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode() != http.StatusNotFound || r.ApplicationproblemJSON404 == nil || !strings.HasSuffix(r.ApplicationproblemJSON404.Type, "/not-found") {
		t.Errorf("another tenant's GET: status %d, %s", r.StatusCode(), r.Body)
	}
}

// TestAdminRecord reads the record of a submitted job with the admin
// client (in process: it needs the admin listener and token).
func TestAdminRecord(t *testing.T) {
	tg := newTarget(t)
	if tg.real() {
		t.Skip("the admin round trip runs in process only")
	}
	id := unique(t)
	key := "admin-" + id
	a, err := routes[0].submit(t.Context(), newClient(t, tg.url, tg.http, tg.apiKey), key, id, false)
	if err != nil || a.job == nil {
		t.Fatalf("submit: %v, status %d", err, a.status)
	}
	adm := newClient(t, tg.srv.Admin.URL, tg.srv.Admin.Client(), openapitest.AdminToken)
	r, err := adm.GetIdempotencyRecordWithResponse(t.Context(), openapitest.Tenant, "invoices", key)
	if err != nil {
		t.Fatal(err)
	}
	rec := r.JSON200
	if rec == nil || rec.State != openapi.RecordStateCompleted || rec.Key != key || rec.Response == nil || rec.Response.Status != http.StatusAccepted {
		t.Fatalf("record: status %d, %s", r.StatusCode(), r.Body)
	}
	var stored openapi.Job
	if err := json.Unmarshal(rec.Response.BodyBase64, &stored); err != nil || stored.Id != a.job.Id {
		t.Errorf("stored body names job %q (%v), want %s", stored.Id, err, a.job.Id)
	}
	if loc := rec.Response.Header["Location"]; len(loc) != 1 || loc[0] != "/v1/jobs/"+a.job.Id {
		t.Errorf("stored Location %v", loc)
	}

	del, err := adm.DeleteIdempotencyRecordWithResponse(t.Context(), openapitest.Tenant, "invoices", key)
	if err != nil || del.StatusCode() != http.StatusNoContent {
		t.Fatalf("delete: %v, status %d", err, del.StatusCode())
	}
	r, err = adm.GetIdempotencyRecordWithResponse(t.Context(), openapitest.Tenant, "invoices", key)
	if err != nil || r.ApplicationproblemJSON404 == nil {
		t.Errorf("after delete: %v, status %d", err, r.StatusCode())
	}
}

// TestAdminKeyWithSlash: a key may hold "/" (bare in compat syntax, or
// inside an sf-string); the client sends it percent-encoded as one path
// segment and the admin API must find its record.
func TestAdminKeyWithSlash(t *testing.T) {
	tg := newTarget(t)
	if tg.real() {
		t.Skip("in process only")
	}
	const key = "orders/42"
	a, err := routes[0].submit(t.Context(), newClient(t, tg.url, tg.http, tg.apiKey), key, unique(t), false)
	if err != nil || a.status != http.StatusAccepted {
		t.Fatalf("submit: %v, status %d", err, a.status)
	}
	adm := newClient(t, tg.srv.Admin.URL, tg.srv.Admin.Client(), openapitest.AdminToken)
	r, err := adm.GetIdempotencyRecordWithResponse(t.Context(), openapitest.Tenant, "invoices", key)
	if err != nil || r.JSON200 == nil || r.JSON200.Key != key {
		t.Errorf("record of %q: %v, status %d, %s", key, err, r.StatusCode(), r.Body)
	}
}
