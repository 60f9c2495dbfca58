package apiclient_test

import (
	"bytes"
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

	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/openapi/apiclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// target is the gateway the round trip runs against: an in-process one
// with a fake queue, or, with TEST_IDEMGATE_URL and TEST_IDEMGATE_API_KEY
// set, a running gateway whose workers run the jobs.
type target struct {
	url, apiKey string
	http        *http.Client
	// In process only.
	srv  *gatewaytest.Server
	jobs *gatewaytest.Queue
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
	jobs := gatewaytest.NewQueue()
	srv := gatewaytest.Start(t, gatewaytest.Options(jobs, memstore.New()))
	return target{url: srv.Public.URL, apiKey: gatewaytest.APIKey, http: srv.Public.Client(), srv: srv, jobs: jobs}
}

func newClient(t *testing.T, base string, hc *http.Client, token string) *apiclient.ClientWithResponses {
	t.Helper()
	c, err := apiclient.NewClientWithResponses(base, apiclient.WithHTTPClient(hc),
		apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
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

// submit posts body to an enqueue route with key. Enqueue routes are
// configuration, so the generated client has no method for them: a Go
// client posts the payload and reads the answer into the models.
func submit(ctx context.Context, c *apiclient.Client, path, key string, body any) (answer, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return answer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.Server, "/")+path, bytes.NewReader(b))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for _, edit := range c.RequestEditors {
		if err := edit(ctx, req); err != nil {
			return answer{}, err
		}
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, location: resp.Header.Get("Location"), replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	dec := json.NewDecoder(resp.Body)
	switch {
	case resp.StatusCode == http.StatusAccepted:
		a.job = &openapi.Job{}
		err = dec.Decode(a.job)
	case resp.StatusCode >= 400:
		a.problem = &openapi.Problem{}
		err = dec.Decode(a.problem)
	}
	return a, err
}

// routes are the example enqueue routes, each with a payload whose
// business identity id makes unique; change alters the request.
var routes = []struct {
	name, path, task string
	body             func(id string, change bool) map[string]any
}{
	{"invoices", "/v1/invoices", "invoice.create", func(id string, change bool) map[string]any {
		b := map[string]any{"order_id": "order-" + id, "amount_cents": 4200, "currency": "EUR"}
		if change {
			b["amount_cents"] = 4201
		}
		return b
	}},
	{"inventory", "/v1/inventory/adjustments", "inventory.adjust", func(id string, change bool) map[string]any {
		b := map[string]any{"adjustment_id": "adj-" + id, "sku": "sku-" + id, "delta": 5}
		if change {
			b["delta"] = -5
		}
		return b
	}},
	{"charges", "/v1/payments/charges", "payment.charge", func(id string, change bool) map[string]any {
		b := map[string]any{"payment_id": "pay-" + id, "amount_cents": 1250, "currency": "EUR"}
		if change {
			b["currency"] = "USD"
		}
		return b
	}},
	{"notifications", "/v1/notifications", "notification.send", func(id string, change bool) map[string]any {
		b := map[string]any{"event_id": "evt-" + id, "user_id": "user-" + id, "template": "welcome"}
		if change {
			b["template"] = "goodbye"
		}
		return b
	}},
	{"shipments", "/v1/shipments", "shipment.book", func(id string, change bool) map[string]any {
		b := map[string]any{"order_id": "ship-" + id, "quantity": 2}
		if change {
			b["quantity"] = 3
		}
		return b
	}},
}

// rawClient is the plain client beneath c, which submit uses.
func rawClient(t *testing.T, c *apiclient.ClientWithResponses) *apiclient.Client {
	t.Helper()
	raw, ok := c.ClientInterface.(*apiclient.Client)
	if !ok {
		t.Fatalf("the client is a %T", c.ClientInterface)
	}
	return raw
}

// TestRoundTrip submits a job on each enqueue route with the generated
// client, submits it again (the same job), reads it back, and checks that
// the key cannot be reused for another request.
func TestRoundTrip(t *testing.T) {
	tg := newTarget(t)
	c := newClient(t, tg.url, tg.http, tg.apiKey)
	raw := rawClient(t, c)
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			ctx := t.Context()
			id := unique(t)
			key := "rt-" + id

			first, err := submit(ctx, raw, rt.path, key, rt.body(id, false))
			if err != nil {
				t.Fatal(err)
			}
			if first.status != http.StatusAccepted || first.job == nil {
				t.Fatalf("submit: status %d, job %v", first.status, first.job)
			}
			doc := *first.job
			if doc.Task != rt.task || first.location != "/v1/jobs/"+doc.Id || first.replayed {
				t.Errorf("submit: job %+v, Location %q, replayed %v", doc, first.location, first.replayed)
			}

			// A retry, with the key in its quoted form: the same job.
			again, err := submit(ctx, raw, rt.path, `"`+key+`"`, rt.body(id, false))
			if err != nil {
				t.Fatal(err)
			}
			if again.status != http.StatusAccepted || again.job == nil || again.job.Id != doc.Id || !again.replayed {
				t.Fatalf("retry: status %d, job %v, replayed %v; want job %s replayed", again.status, again.job, again.replayed, doc.Id)
			}

			reused, err := submit(ctx, raw, rt.path, key, rt.body(id, true))
			if err != nil {
				t.Fatal(err)
			}
			if reused.status != http.StatusUnprocessableEntity || reused.problem == nil || !strings.HasSuffix(reused.problem.Type, "/idempotency-key-reused") {
				t.Errorf("same key, other request: status %d, problem %+v", reused.status, reused.problem)
			}

			got, err := c.GetJobWithResponse(ctx, doc.Id, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.JSON200 == nil || got.JSON200.Id != doc.Id || got.JSON200.Task != doc.Task || !got.JSON200.CreatedAt.Equal(doc.CreatedAt) {
				t.Fatalf("get: status %d, %s", got.StatusCode(), got.Body)
			}
			if got.Headers200 == nil || got.Headers200.CacheControl == nil || *got.Headers200.CacheControl != "no-store" {
				t.Errorf("get: headers %+v", got.Headers200)
			}

			if !tg.real() {
				// Play the worker.
				tg.jobs.Update(doc.Id, func(j *job.Row) {
					ref := "ref_" + id
					j.Status, j.Attempts, j.ResultRef = job.StatusSucceeded, 1, &ref
				})
			}
			done := waitDone(t, c, doc.Id)
			if done.Status != openapi.JobStatusSucceeded || done.ResultRef == nil || *done.ResultRef == "" || done.Attempts < 1 {
				t.Errorf("finished job %+v", done)
			}
		})
	}
}

// waitDone polls the job until it succeeded or failed.
func waitDone(t *testing.T, c *apiclient.ClientWithResponses, id string) openapi.Job {
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
		other = gatewaytest.OtherAPIKey
	}
	if other == "" {
		t.Skip("TEST_IDEMGATE_OTHER_API_KEY names no second tenant")
	}
	id := unique(t)
	a, err := submit(t.Context(), rawClient(t, newClient(t, tg.url, tg.http, tg.apiKey)), routes[0].path, "tenant-"+id, routes[0].body(id, false))
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
	a, err := submit(t.Context(), rawClient(t, newClient(t, tg.url, tg.http, tg.apiKey)), routes[0].path, key, routes[0].body(id, false))
	if err != nil || a.job == nil {
		t.Fatalf("submit: %v, status %d", err, a.status)
	}
	adm := newClient(t, tg.srv.Admin.URL, tg.srv.Admin.Client(), gatewaytest.AdminToken)
	r, err := adm.GetIdempotencyRecordWithResponse(t.Context(), gatewaytest.Tenant, "invoices", key)
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

	del, err := adm.DeleteIdempotencyRecordWithResponse(t.Context(), gatewaytest.Tenant, "invoices", key, nil)
	if err != nil || del.StatusCode() != http.StatusNoContent {
		t.Fatalf("delete: %v, status %d", err, del.StatusCode())
	}
	r, err = adm.GetIdempotencyRecordWithResponse(t.Context(), gatewaytest.Tenant, "invoices", key)
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
	a, err := submit(t.Context(), rawClient(t, newClient(t, tg.url, tg.http, tg.apiKey)), routes[0].path, key, routes[0].body(unique(t), false))
	if err != nil || a.status != http.StatusAccepted {
		t.Fatalf("submit: %v, status %d", err, a.status)
	}
	adm := newClient(t, tg.srv.Admin.URL, tg.srv.Admin.Client(), gatewaytest.AdminToken)
	r, err := adm.GetIdempotencyRecordWithResponse(t.Context(), gatewaytest.Tenant, "invoices", key)
	if err != nil || r.JSON200 == nil || r.JSON200.Key != key {
		t.Errorf("record of %q: %v, status %d, %s", key, err, r.StatusCode(), r.Body)
	}
}
