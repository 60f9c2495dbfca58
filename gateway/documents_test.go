package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// fakeJobs is a gateway.Submitter whose answers the test chooses.
type fakeJobs struct {
	submit func(context.Context, job.Request) (job.Row, error)
	get    func(ctx context.Context, tenant, id string) (job.Row, error)
}

func (f fakeJobs) Submit(ctx context.Context, req job.Request) (job.Row, error) {
	return f.submit(ctx, req)
}

func (f fakeJobs) Get(ctx context.Context, tenant, id string) (job.Row, error) {
	return f.get(ctx, tenant, id)
}

func hexSum(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

const (
	testAPIKey     = "acme-key"
	testAdminToken = "admin-token"
)

// invoiceSpec is the declared job behind /v1/invoices. Its schema is
// testdata/invoice.create.json.
var invoiceSpec = func() *job.Spec {
	schema, err := os.ReadFile("testdata/invoice.create.json")
	if err != nil {
		panic(err)
	}
	spec, err := job.NewSpec("invoice.create", schema, "invoice:{order_id}", "")
	if err != nil {
		panic(err)
	}
	return spec
}()

// testOptions is a gateway with api_key auth for tenant acme, the admin
// token, a memory store and one enqueue route, /v1/invoices, on jobs.
func testOptions(jobs Submitter) Options {
	return Options{
		Auth: auth.Config{Mode: auth.ModeAPIKey, Tenants: []auth.TenantKeys{
			{Name: "acme", APIKeySHA256s: []string{hexSum(testAPIKey)}},
		}},
		Store:            memstore.New(),
		StoreName:        "memory",
		AdminTokenSHA256: hexSum(testAdminToken),
		Jobs:             jobs,
		Logger:           slog.New(slog.DiscardHandler),
		Routes: []RouteOptions{{
			Name: "invoices", Methods: []string{http.MethodPost}, Path: "/v1/invoices",
			Enqueue: &EnqueueOptions{Spec: invoiceSpec, Queue: "default"},
		}},
	}
}

// servePayments serves a gateway built from opts whose one route,
// payments, proxies POST /v1/payments to upstream, and returns the
// gateway and its public server.
func servePayments(t *testing.T, opts Options, upstream http.HandlerFunc) (*Gateway, *httptest.Server) {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	opts.Routes = []RouteOptions{{Name: "payments", Methods: []string{http.MethodPost}, Path: "/v1/payments", Upstream: upURL}}
	g := newTestGateway(t, opts)
	public := httptest.NewServer(g.Handler())
	t.Cleanup(public.Close)
	return g, public
}

func newTestGateway(t *testing.T, opts Options) *Gateway {
	t.Helper()
	g, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g
}

// serve runs one request through h and returns the answer with its body.
func serve(t *testing.T, h http.Handler, method, target, body string, header ...string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequestWithContext(t.Context(), method, target, r)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var (
	created = time.Date(2026, 12, 2, 19, 43, 56, 24825000, time.UTC)
	updated = created.Add(311 * time.Millisecond)
)

// TestDocumentsOnTheWire pins the bytes of every JSON document the
// gateway writes itself: the order of the fields, null against absent,
// and the trailing newline are what clients and stored replays see.
func TestDocumentsOnTheWire(t *testing.T) {
	t.Parallel()
	ref := "inv_2e3e9e48ed0440af9dbf6cce317d08ed"
	rec := job.Row{
		ID: "job_8971b00d3650c8ca83d47f1920051829", Task: "invoice.create", Status: job.StatusQueued,
		CreatedAt: created, UpdatedAt: created, Tenant: "acme", Route: "invoices",
	}
	done := rec
	done.Status, done.Attempts, done.ResultRef, done.UpdatedAt = job.StatusSucceeded, 1, &ref, updated
	g := newTestGateway(t, testOptions(fakeJobs{
		submit: func(_ context.Context, req job.Request) (job.Row, error) {
			if _, err := req.Spec.Decode(req.Body); err != nil {
				return job.Row{}, err
			}
			return rec, nil
		},
		get: func(context.Context, string, string) (job.Row, error) { return done, nil },
	}))
	auth := []string{"Authorization", "Bearer " + testAPIKey, "X-Request-Id", "req-1"}
	tests := []struct {
		name, method, target, body string
		header                     []string
		status                     int
		contentType, want          string
	}{
		{"health", http.MethodGet, "/healthz", "", nil, http.StatusOK, "application/json", `{"status":"ok"}` + "\n"},
		{"readiness", http.MethodGet, "/readyz", "", nil, http.StatusOK, "application/json", `{"status":"ready"}` + "\n"},
		{"job accepted", http.MethodPost, "/v1/invoices", `{"order_id":"o-1","amount_cents":4200,"currency":"EUR"}`,
			append([]string{"Idempotency-Key", "k1"}, auth...), http.StatusAccepted, "application/json", `{
  "id": "job_8971b00d3650c8ca83d47f1920051829",
  "task": "invoice.create",
  "status": "queued",
  "attempts": 0,
  "result_ref": null,
  "error": null,
  "created_at": "2026-12-02T19:43:56.024825Z",
  "updated_at": "2026-12-02T19:43:56.024825Z"
}
`},
		{"job", http.MethodGet, "/v1/jobs/" + rec.ID, "", auth, http.StatusOK, "application/json", `{
  "id": "job_8971b00d3650c8ca83d47f1920051829",
  "task": "invoice.create",
  "status": "succeeded",
  "attempts": 1,
  "result_ref": "inv_2e3e9e48ed0440af9dbf6cce317d08ed",
  "error": null,
  "created_at": "2026-12-02T19:43:56.024825Z",
  "updated_at": "2026-12-02T19:43:56.335825Z"
}
`},
		{"problem with fields", http.MethodPost, "/v1/invoices", `{"order_id":"o-2","amount_cents":-1,"currency":"EUR"}`,
			append([]string{"Idempotency-Key", "k2"}, auth...), http.StatusUnprocessableEntity, "application/problem+json",
			`{"type":"https://idemgate.dev/problems/invalid-payload","title":"Invalid payload","status":422,` +
				`"detail":"invalid payload: amount_cents: must be at least 1",` +
				`"instance":"urn:uuid:c5cc59ef-6d2f-50b2-9b2a-3283dd65c6e9","request_id":"req-1","retryable":false,` +
				`"idempotency_key":"k2","errors":[{"field":"amount_cents","message":"must be at least 1"}]}` + "\n"},
		{"problem", http.MethodGet, "/v1/nothing", "", []string{"X-Request-Id", "req-2"}, http.StatusNotFound, "application/problem+json",
			`{"type":"https://idemgate.dev/problems/not-found","title":"Not found","status":404,` +
				`"detail":"no route matches GET /v1/nothing",` +
				`"instance":"urn:uuid:f336c8f6-073f-59d7-97ba-e62afe7075dd","request_id":"req-2","retryable":false}` + "\n"},
		{"problem with documentation", http.MethodPost, "/v1/invoices", `{}`,
			[]string{"Authorization", "Bearer " + testAPIKey, "X-Request-Id", "0193A8C4-7B1E-7C3D-9F00-1A2B3C4D5E6F"},
			http.StatusBadRequest, "application/problem+json",
			`{"type":"https://idemgate.dev/problems/idempotency-key-missing","title":"Idempotency-Key header missing","status":400,` +
				`"detail":"POST requests to this route need an Idempotency-Key header",` +
				`"instance":"urn:uuid:0193a8c4-7b1e-7c3d-9f00-1a2b3c4d5e6f","request_id":"0193A8C4-7B1E-7C3D-9F00-1A2B3C4D5E6F",` +
				`"retryable":false,` +
				`"documentation":"https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header#section-2.1"}` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := serve(t, g.Handler(), tc.method, tc.target, tc.body, tc.header...)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.contentType {
				t.Errorf("status %d, Content-Type %q; want %d, %q", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.contentType)
			}
			if body != tc.want {
				t.Errorf("body\n%s\nwant\n%s", body, tc.want)
			}
		})
	}
}

// TestRecordDocumentOnTheWire pins the admin API's record document (also
// what `idemgate keys get` prints): field order, lease_until and response
// left out when there is none, and an empty stored body as "".
func TestRecordDocumentOnTheWire(t *testing.T) {
	t.Parallel()
	scope := idempotency.Scope{Tenant: "acme", Route: "invoices", Key: "inv-42"}
	fp := strings.Repeat("3a", 32)
	tests := []struct {
		name string
		rec  idempotency.Record
		want string
	}{
		{"in flight", idempotency.Record{
			Scope: scope, Fingerprint: fp, State: idempotency.StateInFlight, FencingToken: 2,
			LeaseUntil: updated, CreatedAt: created, UpdatedAt: updated, ExpiresAt: updated.Add(24 * time.Hour),
		}, `{
  "tenant": "acme",
  "route": "invoices",
  "key": "inv-42",
  "state": "in_flight",
  "fingerprint": "` + fp + `",
  "fencing_token": 2,
  "lease_until": "2026-12-02T19:43:56.335825Z",
  "created_at": "2026-12-02T19:43:56.024825Z",
  "updated_at": "2026-12-02T19:43:56.335825Z",
  "expires_at": "2026-12-03T19:43:56.335825Z"
}
`},
		{"completed", idempotency.Record{
			Scope: scope, Fingerprint: fp, State: idempotency.StateCompleted, FencingToken: 1,
			CreatedAt: created, UpdatedAt: updated, ExpiresAt: updated.Add(24 * time.Hour),
			Response: &idempotency.Response{Status: 202, Header: http.Header{"Location": {"/v1/jobs/job_1"}}, Body: []byte("{}\n")},
		}, `{
  "tenant": "acme",
  "route": "invoices",
  "key": "inv-42",
  "state": "completed",
  "fingerprint": "` + fp + `",
  "fencing_token": 1,
  "created_at": "2026-12-02T19:43:56.024825Z",
  "updated_at": "2026-12-02T19:43:56.335825Z",
  "expires_at": "2026-12-03T19:43:56.335825Z",
  "response": {
    "status": 202,
    "header": {
      "Location": [
        "/v1/jobs/job_1"
      ]
    },
    "body_base64": "e30K",
    "body_omitted": false
  }
}
`},
		{"body omitted", idempotency.Record{
			Scope: scope, Fingerprint: fp, State: idempotency.StateCompleted, FencingToken: 1,
			CreatedAt: created, UpdatedAt: updated, ExpiresAt: updated.Add(24 * time.Hour),
			Response: &idempotency.Response{Status: 200, Header: http.Header{}, BodyOmitted: true},
		}, `{
  "tenant": "acme",
  "route": "invoices",
  "key": "inv-42",
  "state": "completed",
  "fingerprint": "` + fp + `",
  "fencing_token": 1,
  "created_at": "2026-12-02T19:43:56.024825Z",
  "updated_at": "2026-12-02T19:43:56.335825Z",
  "expires_at": "2026-12-03T19:43:56.335825Z",
  "response": {
    "status": 200,
    "header": {},
    "body_base64": "",
    "body_omitted": true
  }
}
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeJSON(rec, http.StatusOK, NewRecordDocument(tc.rec))
			if got := rec.Body.String(); got != tc.want {
				t.Errorf("document\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
