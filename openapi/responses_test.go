package openapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/openapi"
)

const invoice = `{"order_id":"order-42","amount_cents":4200,"currency":"EUR"}`

// post sends an invoice request as tenant apiKey with key (none when "").
func post(t *testing.T, srv *gatewaytest.Server, apiKey, key, body string, header ...string) exchange {
	t.Helper()
	h := []string{"Content-Type", "application/json"}
	if apiKey != "" {
		h = append(h, "Authorization", bearer(apiKey))
	}
	if key != "" {
		h = append(h, "Idempotency-Key", key)
	}
	return send(t, srv.Public.Client(), newRequest(t, http.MethodPost, srv.Public.URL+"/v1/invoices", body, append(h, header...)...))
}

func admin(t *testing.T, srv *gatewaytest.Server, method, path string) exchange {
	t.Helper()
	return send(t, srv.Admin.Client(), newRequest(t, method, srv.Admin.URL+path, "", "Authorization", bearer(gatewaytest.AdminToken)))
}

func getJob(t *testing.T, srv *gatewaytest.Server, apiKey, id string) exchange {
	t.Helper()
	return send(t, srv.Public.Client(), newRequest(t, http.MethodGet, srv.Public.URL+"/v1/jobs/"+id, "", "Authorization", bearer(apiKey)))
}

// downStore is an idempotency store whose database is unreachable.
type downStore struct{ idempotency.Store }

func (downStore) Claim(context.Context, idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	return idempotency.ClaimResult{}, errDown
}

func (downStore) Get(context.Context, idempotency.Scope) (idempotency.Record, error) {
	return idempotency.Record{}, errDown
}

// TestEnqueueResponsesMatchSpec drives an enqueue route through each of its
// answers and validates them against the description.
func TestEnqueueResponsesMatchSpec(t *testing.T) {
	t.Parallel()
	api := describe(t, loadServed(t))
	jobs := gatewaytest.NewQueue()
	srv := gatewaytest.Start(t, gatewaytest.Options(jobs, memstore.New()))

	var doc openapi.Job
	t.Run("202 accepted", func(t *testing.T) {
		ex := post(t, srv, gatewaytest.APIKey, "inv-1", invoice)
		wantStatus(t, ex, http.StatusAccepted)
		api.check(t, ex)
		doc = decodeBody[openapi.Job](t, ex, "job document")
		if loc := ex.resp.Header.Get("Location"); loc != "/v1/jobs/"+doc.Id {
			t.Errorf("Location %q, want /v1/jobs/%s", loc, doc.Id)
		}
		if doc.Id != job.ID(gatewaytest.Tenant, "invoices", "inv-1") || doc.Task != "invoice.create" || doc.Status != openapi.JobStatusQueued {
			t.Errorf("job %+v", doc)
		}
		if ex.resp.Header.Get("Idempotent-Replayed") != "" {
			t.Error("a first answer is marked replayed")
		}
	})
	t.Run("202 replayed", func(t *testing.T) {
		// Key order and white space do not make another request; the
		// quoted form of a key is the same key.
		ex := post(t, srv, gatewaytest.APIKey, `"inv-1"`, `{ "currency": "EUR", "amount_cents": 4200, "order_id": "order-42" }`)
		wantStatus(t, ex, http.StatusAccepted)
		api.check(t, ex)
		if got := decodeBody[openapi.Job](t, ex, "job document"); got.Id != doc.Id {
			t.Errorf("replay names job %s, want %s", got.Id, doc.Id)
		}
		if ex.resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Error("replay without Idempotent-Replayed: true")
		}
	})
	t.Run("400 idempotency-key-missing", func(t *testing.T) {
		ex := post(t, srv, gatewaytest.APIKey, "", invoice)
		wantProblem(t, ex, http.StatusBadRequest, "idempotency-key-missing")
		api.check(t, ex)
	})
	for name, keys := range map[string][]string{
		"a list":         {"a, b"},
		"repeated":       {"k", "k"},
		"unterminated":   {`"abc`},
		"too long":       {strings.Repeat("k", 256)},
		"empty quoted":   {`""`},
		"with parameter": {`"abc";v=1`},
	} {
		t.Run("400 idempotency-key-invalid/"+name, func(t *testing.T) {
			var h []string
			for _, k := range keys {
				h = append(h, "Idempotency-Key", k)
			}
			ex := post(t, srv, gatewaytest.APIKey, "", invoice, h...)
			wantProblem(t, ex, http.StatusBadRequest, "idempotency-key-invalid")
			api.check(t, ex)
		})
	}
	for name, contentType := range map[string]string{
		"not JSON":        "application/json",
		"two JSON values": "application/json",
		"media type":      "text/plain",
	} {
		t.Run("400 bad-request/"+name, func(t *testing.T) {
			body := map[string]string{"not JSON": `order_id=o1`, "two JSON values": invoice + invoice, "media type": invoice}[name]
			ex := send(t, srv.Public.Client(), newRequest(t, http.MethodPost, srv.Public.URL+"/v1/invoices", body,
				"Authorization", bearer(gatewaytest.APIKey), "Idempotency-Key", "bad-"+strings.ReplaceAll(name, " ", "-"), "Content-Type", contentType))
			p := wantProblem(t, ex, http.StatusBadRequest, "bad-request")
			api.check(t, ex)
			if contentType != "application/json" {
				if p.Errors != nil {
					t.Errorf("errors %v for a wrong media type", *p.Errors)
				}
			} else if p.Errors == nil || len(*p.Errors) != 1 || (*p.Errors)[0].Field != "" {
				t.Errorf("errors %v, want one for the whole body", p.Errors)
			}
		})
	}
	for name, tc := range map[string]struct{ key, body, fields string }{
		"bad fields":    {"bad-fields", `{"order_id":"o:1","amount_cents":0,"currency":"eur"}`, "amount_cents,currency,order_id"},
		"unknown field": {"unknown-field", `{"order_id":"o1","amount_cents":1,"currency":"EUR","x":1}`, "x"},
		"wrong type":    {"wrong-type", `{"order_id":"o1","amount_cents":"1","currency":"EUR"}`, "amount_cents"},
		"not an object": {"not-an-object", `[1]`, ""},
	} {
		t.Run("422 invalid-payload/"+name, func(t *testing.T) {
			ex := post(t, srv, gatewaytest.APIKey, tc.key, tc.body)
			p := wantProblem(t, ex, http.StatusUnprocessableEntity, "invalid-payload")
			api.check(t, ex)
			var fields []string
			if p.Errors != nil {
				for _, e := range *p.Errors {
					fields = append(fields, e.Field)
				}
			}
			slices.Sort(fields)
			if strings.Join(fields, ",") != tc.fields || len(fields) == 0 {
				t.Errorf("errors name %q, want %q", fields, tc.fields)
			}
			// The refusal is the stored answer: a retry gets it again.
			again := post(t, srv, gatewaytest.APIKey, tc.key, tc.body)
			wantProblem(t, again, http.StatusUnprocessableEntity, "invalid-payload")
			api.check(t, again)
			if again.resp.Header.Get("Idempotent-Replayed") != "true" {
				t.Error("the retry of a stored 422 is not a replay")
			}
		})
	}
	t.Run("422 idempotency-key-reused", func(t *testing.T) {
		ex := post(t, srv, gatewaytest.APIKey, "inv-1", strings.Replace(invoice, "4200", "9999", 1))
		wantProblem(t, ex, http.StatusUnprocessableEntity, "idempotency-key-reused")
		api.check(t, ex)
	})
	for name, key := range map[string]string{"no credentials": "", "unknown key": "nobody's-key"} {
		t.Run("401 unauthorized/"+name, func(t *testing.T) {
			ex := post(t, srv, key, "inv-1", invoice)
			wantProblem(t, ex, http.StatusUnauthorized, "unauthorized")
			api.check(t, ex)
			wantChallenge(t, ex)
		})
	}
	t.Run("404 not-found for a method no route takes", func(t *testing.T) {
		ex := send(t, srv.Public.Client(), newRequest(t, http.MethodGet, srv.Public.URL+"/v1/invoices", "", "Authorization", bearer(gatewaytest.APIKey)))
		wantProblem(t, ex, http.StatusNotFound, "not-found")
		api.checkSchema(t, "Problem", ex.body)
	})
}

func TestJobResponsesMatchSpec(t *testing.T) {
	t.Parallel()
	api := describe(t, loadServed(t))
	jobs := gatewaytest.NewQueue()
	var getFails atomic.Bool
	jobs.BeforeGet = func(context.Context, string, string) error {
		if getFails.Load() {
			return errDown
		}
		return nil
	}
	srv := gatewaytest.Start(t, gatewaytest.Options(jobs, memstore.New()))
	accepted := post(t, srv, gatewaytest.APIKey, "job-1", invoice)
	wantStatus(t, accepted, http.StatusAccepted)
	id := decodeBody[openapi.Job](t, accepted, "job document").Id

	t.Run("200 queued", func(t *testing.T) {
		ex := getJob(t, srv, gatewaytest.APIKey, id)
		wantStatus(t, ex, http.StatusOK)
		api.check(t, ex)
		if string(ex.body) != string(accepted.body) {
			t.Errorf("GET shows\n%s\nthe 202 said\n%s", ex.body, accepted.body)
		}
		if ex.resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("Cache-Control %q", ex.resp.Header.Get("Cache-Control"))
		}
	})
	t.Run("200 succeeded", func(t *testing.T) {
		jobs.Update(id, func(j *job.Row) {
			ref := "inv_2e3e9e48ed0440af9dbf6cce317d08ed"
			j.Status, j.Attempts, j.ResultRef = job.StatusSucceeded, 1, &ref
		})
		ex := getJob(t, srv, gatewaytest.APIKey, id)
		wantStatus(t, ex, http.StatusOK)
		api.check(t, ex)
		if j := decodeBody[openapi.Job](t, ex, "job document"); j.Status != openapi.JobStatusSucceeded || j.ResultRef == nil || j.Error != nil {
			t.Errorf("job %+v", j)
		}
	})
	t.Run("200 failed", func(t *testing.T) {
		jobs.Update(id, func(j *job.Row) {
			msg := "partner: card declined"
			j.Status, j.Attempts, j.ResultRef, j.Error = job.StatusFailed, 10, nil, &msg
		})
		ex := getJob(t, srv, gatewaytest.APIKey, id)
		wantStatus(t, ex, http.StatusOK)
		api.check(t, ex)
	})
	t.Run("404 another tenant's job", func(t *testing.T) {
		ex := getJob(t, srv, gatewaytest.OtherAPIKey, id)
		wantProblem(t, ex, http.StatusNotFound, "not-found")
		api.check(t, ex)
	})
	t.Run("404 no such job", func(t *testing.T) {
		ex := getJob(t, srv, gatewaytest.APIKey, "job_00000000000000000000000000000000")
		wantProblem(t, ex, http.StatusNotFound, "not-found")
		api.check(t, ex)
	})
	t.Run("401 unauthorized", func(t *testing.T) {
		ex := getJob(t, srv, "", id)
		wantProblem(t, ex, http.StatusUnauthorized, "unauthorized")
		api.check(t, ex)
		wantChallenge(t, ex)
	})
	t.Run("503 queue-unavailable", func(t *testing.T) {
		getFails.Store(true)
		defer getFails.Store(false)
		ex := getJob(t, srv, gatewaytest.APIKey, id)
		p := wantProblem(t, ex, http.StatusServiceUnavailable, "queue-unavailable")
		api.check(t, ex)
		if strings.Contains(p.Detail, "10.0.0.7") {
			t.Errorf("a 5xx detail leaks its cause: %q", p.Detail)
		}
	})
}

func TestRefusalsMatchSpec(t *testing.T) {
	t.Parallel()
	api := describe(t, loadServed(t))

	t.Run("409 idempotency-key-in-use", func(t *testing.T) {
		t.Parallel()
		jobs := gatewaytest.NewQueue()
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		jobs.Before = func(ctx context.Context, req job.Request) error {
			once.Do(func() { close(entered) })
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		srv := gatewaytest.Start(t, gatewaytest.Options(jobs, memstore.New()))
		first := sendAsync(t, srv.Public.Client(), newRequest(t, http.MethodPost, srv.Public.URL+"/v1/invoices", invoice,
			"Authorization", bearer(gatewaytest.APIKey), "Idempotency-Key", "slow", "Content-Type", "application/json"))
		<-entered
		ex := post(t, srv, gatewaytest.APIKey, "slow", invoice)
		close(release)
		wantProblem(t, ex, http.StatusConflict, "idempotency-key-in-use")
		api.check(t, ex)
		if s, err := strconv.Atoi(ex.resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 30 {
			t.Errorf("Retry-After %q, want 1..lease seconds", ex.resp.Header.Get("Retry-After"))
		}
		orig := <-first
		if orig.resp == nil {
			return
		}
		wantStatus(t, orig, http.StatusAccepted)
		after := post(t, srv, gatewaytest.APIKey, "slow", invoice)
		wantStatus(t, after, http.StatusAccepted)
		if after.resp.Header.Get("Idempotent-Replayed") != "true" || string(after.body) != string(orig.body) {
			t.Error("after the original finished, a retry is not its replay")
		}
	})

	t.Run("413 request-too-large", func(t *testing.T) {
		t.Parallel()
		opts := gatewaytest.Options(gatewaytest.NewQueue(), memstore.New())
		opts.Routes[0].Idempotency.MaxRequestBytes = 64
		srv := gatewaytest.Start(t, opts)
		body := `{"order_id":"` + strings.Repeat("o", 60) + `","amount_cents":4200,"currency":"EUR"}`
		ex := post(t, srv, gatewaytest.APIKey, "big", body)
		wantProblem(t, ex, http.StatusRequestEntityTooLarge, "request-too-large")
		api.check(t, ex)
	})

	t.Run("429 rate-limited", func(t *testing.T) {
		t.Parallel()
		srv := startDefault(t)
		first := post(t, srv, gatewaytest.LimitedAPIKey, "limited-1", invoice)
		wantStatus(t, first, http.StatusAccepted)
		api.check(t, first)
		if first.resp.Header.Get("RateLimit-Limit") != "1" || first.resp.Header.Get("RateLimit-Remaining") != "0" {
			t.Errorf("RateLimit-* %v", first.resp.Header)
		}
		ex := post(t, srv, gatewaytest.LimitedAPIKey, "limited-2", invoice)
		wantProblem(t, ex, http.StatusTooManyRequests, "rate-limited")
		api.check(t, ex)
		if ex.resp.Header.Get("Retry-After") != ex.resp.Header.Get("RateLimit-Reset") {
			t.Errorf("Retry-After %q, RateLimit-Reset %q", ex.resp.Header.Get("Retry-After"), ex.resp.Header.Get("RateLimit-Reset"))
		}
	})

	t.Run("503 idempotency-store-unavailable", func(t *testing.T) {
		t.Parallel()
		srv := gatewaytest.Start(t, gatewaytest.Options(gatewaytest.NewQueue(), downStore{memstore.New()}))
		ex := post(t, srv, gatewaytest.APIKey, "down", invoice)
		p := wantProblem(t, ex, http.StatusServiceUnavailable, "idempotency-store-unavailable")
		api.check(t, ex)
		if strings.Contains(p.Detail, "10.0.0.7") {
			t.Errorf("a 5xx detail leaks its cause: %q", p.Detail)
		}
		ex = admin(t, srv, http.MethodGet, "/admin/keys/acme/invoices/down")
		wantProblem(t, ex, http.StatusServiceUnavailable, "idempotency-store-unavailable")
		api.check(t, ex)
	})

	t.Run("503 queue-unavailable", func(t *testing.T) {
		t.Parallel()
		jobs := gatewaytest.NewQueue()
		var down atomic.Bool
		down.Store(true)
		jobs.Before = func(context.Context, job.Request) error {
			if down.Load() {
				return errDown
			}
			return nil
		}
		srv := gatewaytest.Start(t, gatewaytest.Options(jobs, memstore.New()))
		ex := post(t, srv, gatewaytest.APIKey, "queue-down", invoice)
		p := wantProblem(t, ex, http.StatusServiceUnavailable, "queue-unavailable")
		api.check(t, ex)
		if strings.Contains(p.Detail, "10.0.0.7") {
			t.Errorf("a 5xx detail leaks its cause: %q", p.Detail)
		}
		// Nothing was queued and the key was released: the retry runs.
		down.Store(false)
		ex = post(t, srv, gatewaytest.APIKey, "queue-down", invoice)
		wantStatus(t, ex, http.StatusAccepted)
		if ex.resp.Header.Get("Idempotent-Replayed") != "" {
			t.Error("the retry after a 503 is a replay, not a new execution")
		}
	})

	t.Run("503 not-ready", func(t *testing.T) {
		t.Parallel()
		opts := gatewaytest.Options(gatewaytest.NewQueue(), memstore.New())
		opts.Ready = []gateway.Check{{Name: "postgres", Check: func(context.Context) error { return errDown }}}
		srv := gatewaytest.Start(t, opts)
		ex := send(t, srv.Public.Client(), newRequest(t, http.MethodGet, srv.Public.URL+"/readyz", ""))
		p := wantProblem(t, ex, http.StatusServiceUnavailable, "not-ready")
		api.check(t, ex)
		if p.Detail != "unreachable: postgres" {
			t.Errorf("detail %q", p.Detail)
		}
	})

	t.Run("200 health", func(t *testing.T) {
		t.Parallel()
		srv := startDefault(t)
		for _, path := range []string{"/healthz", "/readyz"} {
			ex := send(t, srv.Public.Client(), newRequest(t, http.MethodGet, srv.Public.URL+path, ""))
			wantStatus(t, ex, http.StatusOK)
			api.check(t, ex)
		}
	})
}

// wantChallenge: a public 401 in api_key mode tells the client to send
// its key as a bearer token.
func wantChallenge(t *testing.T, ex exchange) {
	t.Helper()
	if got := ex.resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="idemgate"` {
		t.Errorf("WWW-Authenticate %q, want a Bearer challenge", got)
	}
}

// TestUnknownOutcomeAndAdminMatchSpec: with on_ambiguous: hold, a request
// whose handler failed half-way is held as unknown until an operator
// resolves it through the admin API; every answer on the way, and every
// admin answer, matches the description.
func TestUnknownOutcomeAndAdminMatchSpec(t *testing.T) {
	t.Parallel()
	api := describe(t, loadServed(t))
	jobs := gatewaytest.NewQueue()
	var boom atomic.Bool
	boom.Store(true)
	jobs.Before = func(context.Context, job.Request) error {
		if boom.CompareAndSwap(true, false) {
			panic("boom: the queue client crashed after sending")
		}
		return nil
	}
	opts := gatewaytest.Options(jobs, memstore.New())
	opts.Routes[0].Idempotency.OnAmbiguous = idempotency.AmbiguousHold
	srv := gatewaytest.Start(t, opts)
	const record = "/admin/keys/acme/invoices/held"

	ex := post(t, srv, gatewaytest.APIKey, "held", invoice)
	p := wantProblem(t, ex, http.StatusInternalServerError, "internal")
	api.check(t, ex)
	if strings.Contains(p.Detail, "boom") {
		t.Errorf("a 5xx detail leaks its cause: %q", p.Detail)
	}

	ex = post(t, srv, gatewaytest.APIKey, "held", invoice)
	wantProblem(t, ex, http.StatusConflict, "idempotency-outcome-unknown")
	api.check(t, ex)

	ex = admin(t, srv, http.MethodGet, record)
	wantStatus(t, ex, http.StatusOK)
	api.check(t, ex)
	held := decodeBody[openapi.IdempotencyRecord](t, ex, "record document")
	if held.State != openapi.RecordStateUnknown || held.FencingToken <= 0 || held.Response != nil {
		t.Errorf("held record %+v", held)
	}

	ex = admin(t, srv, http.MethodPost, record+"/resolve")
	wantStatus(t, ex, http.StatusOK)
	api.check(t, ex)
	if r := decodeBody[openapi.IdempotencyRecord](t, ex, "record document"); r.State != openapi.RecordStateReleased {
		t.Errorf("resolved record %+v", r)
	}

	ex = post(t, srv, gatewaytest.APIKey, "held", invoice)
	wantStatus(t, ex, http.StatusAccepted)
	ex = admin(t, srv, http.MethodGet, record)
	wantStatus(t, ex, http.StatusOK)
	api.check(t, ex)
	r := decodeBody[openapi.IdempotencyRecord](t, ex, "record document")
	if r.State != openapi.RecordStateCompleted || r.FencingToken <= held.FencingToken || r.Response == nil || r.Response.Status != http.StatusAccepted {
		t.Fatalf("completed record %+v", r)
	}
	var stored openapi.Job
	if err := json.Unmarshal(r.Response.BodyBase64, &stored); err != nil || stored.Id != job.ID("acme", "invoices", "held") {
		t.Errorf("stored body %q: %v", r.Response.BodyBase64, err)
	}

	ex = admin(t, srv, http.MethodPost, record+"/resolve")
	wantProblem(t, ex, http.StatusBadRequest, "bad-request")
	api.check(t, ex)

	// The key's story: the completed record at the retry's token. A memory store
	// keeps no claim ledger and this gateway has no job tables.
	ex = admin(t, srv, http.MethodGet, record+"/explain")
	wantStatus(t, ex, http.StatusOK)
	api.check(t, ex)
	story := decodeBody[openapi.Story](t, ex, "story")
	if story.Record == nil || story.Record.State != openapi.RecordStateCompleted || story.Record.FencingToken != r.FencingToken ||
		story.ClaimLedger == nil || *story.ClaimLedger == "" || story.Violation {
		t.Errorf("story %s", ex.body)
	}
	ex = admin(t, srv, http.MethodGet, "/admin/jobs/"+job.ID("acme", "invoices", "held")+"/explain")
	wantProblem(t, ex, http.StatusNotFound, "not-found")
	api.check(t, ex)

	ex = admin(t, srv, http.MethodDelete, record)
	wantStatus(t, ex, http.StatusNoContent)
	api.check(t, ex)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, record}, {http.MethodDelete, record},
		{http.MethodPost, record + "/resolve"}, {http.MethodGet, record + "/explain"},
	} {
		ex = admin(t, srv, c.method, c.path)
		wantProblem(t, ex, http.StatusNotFound, "not-found")
		api.check(t, ex)
	}

	ex = admin(t, srv, http.MethodGet, "/metrics")
	wantStatus(t, ex, http.StatusOK)
	api.check(t, ex)

	for _, path := range []string{record, "/metrics"} {
		ex = send(t, srv.Admin.Client(), newRequest(t, http.MethodGet, srv.Admin.URL+path, "", "Authorization", bearer(gatewaytest.APIKey)))
		wantProblem(t, ex, http.StatusUnauthorized, "unauthorized")
		api.check(t, ex)
		if ex.resp.Header.Get("WWW-Authenticate") == "" {
			t.Error("admin 401 without WWW-Authenticate")
		}
	}

	// A peer that goes on guessing is refused, its right token too.
	for range gateway.DefaultAdminMaxAuthFailures - 2 {
		send(t, srv.Admin.Client(), newRequest(t, http.MethodGet, srv.Admin.URL+record, "", "Authorization", bearer(gatewaytest.APIKey)))
	}
	ex = admin(t, srv, http.MethodGet, record)
	wantProblem(t, ex, http.StatusTooManyRequests, "rate-limited")
	api.check(t, ex)
}
