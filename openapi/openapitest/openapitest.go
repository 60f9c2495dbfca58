// Package openapitest runs an idemgate gateway in the test process for
// the tests of the OpenAPI description and of the generated client: a
// memory idempotency store, an in-memory job queue that validates payloads
// like the real one, the example enqueue routes of
// deploy/local/idemgate.yaml with the example jobs' schemas, three
// tenants and an admin token; it serves the description of those routes
// that openapi.WithJobRoutes makes (Documents). Change the Options before
// Start to add routes or swap the store. A Validator checks any gateway's
// answers, this one's or a real one's, against that description.
//
//	opts := openapitest.Options(openapitest.NewJobs(), memstore.New())
//	srv := openapitest.Start(t, opts)
//	resp, err := http.Post(srv.Public.URL+"/v1/invoices", …)
//	v, err := openapitest.NewValidator(ctx, nil)
//	err = v.Validate(ctx, resp, body)
package openapitest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/openapi"
)

// Credentials of the tenants and of the admin API.
const (
	// Tenant and APIKey: the tenant most tests act as; not rate limited.
	Tenant = "acme"
	APIKey = "acme-key"
	// OtherTenant sees none of Tenant's jobs.
	OtherTenant = "globex"
	OtherAPIKey = "globex-key"
	// LimitedTenant may make one request an hour.
	LimitedTenant = "limited"
	LimitedAPIKey = "limited-key"
	AdminToken    = "admin-token"
)

// EnqueueRoute is one of the example enqueue routes of
// deploy/local/idemgate.yaml and the job it submits, declared as there.
type EnqueueRoute struct {
	Name, Path string
	Task       string
	// Schema is the job's JSON Schema; BusinessKey and Resource its
	// templates.
	Schema                json.RawMessage
	BusinessKey, Resource string
}

// The example jobs' schemas, as examples/schemas declares them.
const (
	invoiceSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "invoice.create",
  "description": "Creates the one invoice of an order.",
  "type": "object",
  "additionalProperties": false,
  "required": ["order_id", "amount_cents", "currency"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "amount_cents": {"type": "integer", "minimum": 1},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code, like EUR"}
  }
}`
	inventorySchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "inventory.adjust",
  "description": "Applies one stock movement, once per adjustment id.",
  "type": "object",
  "additionalProperties": false,
  "required": ["adjustment_id", "sku", "delta"],
  "properties": {
    "adjustment_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "sku": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "delta": {"type": "integer", "not": {"const": 0}}
  }
}`
	chargeSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "payment.charge",
  "description": "Charges a payment at the partner, once.",
  "type": "object",
  "additionalProperties": false,
  "required": ["payment_id", "amount_cents", "currency"],
  "properties": {
    "payment_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "amount_cents": {"type": "integer", "minimum": 1},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code, like EUR"}
  }
}`
	notificationSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "notification.send",
  "description": "Sends one message per (template, user, event).",
  "type": "object",
  "additionalProperties": false,
  "required": ["event_id", "user_id", "template"],
  "properties": {
    "event_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "user_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "template": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"}
  }
}`
	shipmentSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "shipment.book",
  "description": "Books the shipment of an order at the shipping service, once.",
  "type": "object",
  "additionalProperties": false,
  "required": ["order_id", "quantity"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "quantity": {"type": "integer", "minimum": 1, "maximum": 1000}
  }
}`
)

// EnqueueRoutes returns the example enqueue routes: route name, path,
// task and job declaration.
func EnqueueRoutes() []EnqueueRoute {
	return []EnqueueRoute{
		{"invoices", "/v1/invoices", "invoice.create", json.RawMessage(invoiceSchema), "invoice:{order_id}", "order:{order_id}"},
		{"inventory", "/v1/inventory/adjustments", "inventory.adjust", json.RawMessage(inventorySchema), "inventory:{adjustment_id}", "sku:{sku}"},
		{"charges", "/v1/payments/charges", "payment.charge", json.RawMessage(chargeSchema), "payment:{payment_id}", "payment:{payment_id}"},
		{"notifications", "/v1/notifications", "notification.send", json.RawMessage(notificationSchema), "email:{template}:{user_id}:{event_id}", "user:{user_id}"},
		{"shipments", "/v1/shipments", "shipment.book", json.RawMessage(shipmentSchema), "shipment:{order_id}", "order:{order_id}"},
	}
}

// Spec compiles r's job declaration. The declarations are this package's
// own constants, so a failure is a bug here: it panics.
func (r EnqueueRoute) Spec() *job.Spec {
	schema, err := job.CompileSchema(r.Schema, r.Task)
	if err != nil {
		panic("openapitest: " + err.Error())
	}
	key, err := job.ParseTemplate(r.BusinessKey)
	if err != nil {
		panic("openapitest: " + r.Task + ": " + err.Error())
	}
	resource, err := job.ParseTemplate(r.Resource)
	if err != nil {
		panic("openapitest: " + r.Task + ": " + err.Error())
	}
	return &job.Spec{Task: r.Task, Queue: "default", Schema: schema, BusinessKey: key, Resource: resource}
}

// JobRoute is how the served description sees r.
func (r EnqueueRoute) JobRoute() openapi.JobRoute {
	return openapi.JobRoute{Name: r.Name, Path: r.Path, Methods: []string{"POST"}, Task: r.Task, Schema: r.Schema}
}

// Documents returns what the gateway of Options serves at /openapi.yaml
// and /openapi.json: openapi.Spec with the example enqueue routes.
func Documents() (yamlDoc, jsonDoc []byte) {
	var routes []openapi.JobRoute
	for _, r := range EnqueueRoutes() {
		routes = append(routes, r.JobRoute())
	}
	yamlDoc, jsonDoc, err := openapi.WithJobRoutes(openapi.Spec, routes)
	if err != nil {
		panic("openapitest: " + err.Error())
	}
	return yamlDoc, jsonDoc
}

func sum(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

// Options returns the gateway's options: api_key auth for the three
// tenants, the admin token, the example enqueue routes on jobs, store,
// and the description of those routes at /openapi.yaml and /openapi.json.
// A test that changes the enqueue routes serves what WithJobRoutes makes
// of its own.
func Options(jobs gateway.Jobs, store idempotency.Store) gateway.Options {
	yamlDoc, jsonDoc := Documents()
	opts := gateway.Options{
		Auth: auth.Config{Mode: auth.ModeAPIKey, Tenants: []auth.TenantKeys{
			{Name: Tenant, APIKeySHA256s: []string{sum(APIKey)}},
			{Name: OtherTenant, APIKeySHA256s: []string{sum(OtherAPIKey)}},
			{Name: LimitedTenant, APIKeySHA256s: []string{sum(LimitedAPIKey)}},
		}},
		RateLimits:       ratelimit.Limits{LimitedTenant: {Tokens: 1, Interval: time.Hour}},
		Store:            store,
		StoreName:        "memory",
		AdminTokenSHA256: sum(AdminToken),
		Jobs:             jobs,
		OpenAPI:          yamlDoc,
		OpenAPIJSON:      jsonDoc,
		Logger:           slog.New(slog.DiscardHandler),
	}
	for _, r := range EnqueueRoutes() {
		opts.Routes = append(opts.Routes, gateway.RouteOptions{
			Name: r.Name, Methods: []string{"POST"}, Path: r.Path,
			Enqueue: &gateway.EnqueueOptions{Spec: r.Spec()},
		})
	}
	return opts
}

// Server is a started gateway.
type Server struct {
	Gateway *gateway.Gateway
	// Public serves the public listener, Admin the admin listener.
	Public, Admin *httptest.Server
}

// New builds the gateway from opts and serves both listeners until Close.
func New(opts gateway.Options) (*Server, error) {
	g, err := gateway.New(opts)
	if err != nil {
		return nil, err
	}
	return &Server{Gateway: g, Public: httptest.NewServer(g.Handler()), Admin: httptest.NewServer(g.AdminHandler())}, nil
}

// Close stops both listeners and the gateway.
func (s *Server) Close() {
	s.Public.Close()
	s.Admin.Close()
	_ = s.Gateway.Close(context.Background())
}

// Start is New for a test: it fails t on error and closes the server when
// the test ends.
func Start(t testing.TB, opts gateway.Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Jobs is an in-memory gateway.Jobs. Submit validates the body against
// the job's schema and, like the real job store, returns the existing job
// for a (tenant, route, key) it has seen. The zero value is not usable;
// call NewJobs.
type Jobs struct {
	// Before, when set, runs at the start of every Submit; an error it
	// returns is Submit's (a queue outage). It may block to keep a
	// request in flight.
	Before func(ctx context.Context, req enqueue.Request) error
	// BeforeGet, when set, runs at the start of every Get; an error it
	// returns is Get's.
	BeforeGet func(ctx context.Context, tenant, id string) error
	Now       func() time.Time

	mu   sync.Mutex
	jobs map[string]enqueue.Job
}

var _ gateway.Jobs = (*Jobs)(nil)

// NewJobs returns an empty queue.
func NewJobs() *Jobs {
	return &Jobs{Now: time.Now, jobs: map[string]enqueue.Job{}}
}

// Submit records the job of req, or returns the one already recorded.
func (j *Jobs) Submit(ctx context.Context, req enqueue.Request) (enqueue.Job, error) {
	if j.Before != nil {
		if err := j.Before(ctx, req); err != nil {
			return enqueue.Job{}, err
		}
	}
	if req.Spec == nil {
		return enqueue.Job{}, errors.New("openapitest: submit: no job spec")
	}
	p, err := req.Spec.Decode(req.Body)
	if err != nil {
		return enqueue.Job{}, err
	}
	id := enqueue.JobID(req.Tenant, req.Route, req.Key)
	j.mu.Lock()
	defer j.mu.Unlock()
	if job, ok := j.jobs[id]; ok {
		return job, nil
	}
	now := j.Now().UTC()
	job := enqueue.Job{
		ID: id, Task: req.Spec.Task, Status: enqueue.StatusQueued, CreatedAt: now, UpdatedAt: now,
		Tenant: req.Tenant, Route: req.Route, IdempotencyKey: req.Key, Queue: req.Queue,
		BusinessKey: p.BusinessKey, Payload: append([]byte(nil), req.Body...),
	}
	j.jobs[id] = job
	return job, nil
}

// Get returns tenant's job with id, or enqueue.ErrNotFound.
func (j *Jobs) Get(ctx context.Context, tenant, id string) (enqueue.Job, error) {
	if j.BeforeGet != nil {
		if err := j.BeforeGet(ctx, tenant, id); err != nil {
			return enqueue.Job{}, err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.jobs[id]
	if !ok || job.Tenant != tenant {
		return enqueue.Job{}, enqueue.ErrNotFound
	}
	return job, nil
}

// Update changes a recorded job as a worker would (status, attempts,
// result_ref, error) and reports whether it exists.
func (j *Jobs) Update(id string, change func(*enqueue.Job)) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.jobs[id]
	if ok {
		change(&job)
		job.UpdatedAt = j.Now().UTC()
		j.jobs[id] = job
	}
	return ok
}
