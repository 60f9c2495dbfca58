// Package openapitest runs an idemgate gateway in the test process for
// the tests of the OpenAPI description and of the generated client: a
// memory idempotency store, an in-memory job queue that validates payloads
// like the real one, the four example enqueue routes of
// deploy/local/idemgate.yaml, three tenants and an admin token. Change
// the Options before Start to add routes or swap the store. A Validator
// checks any gateway's answers, this one's or a real one's, against
// openapi.yaml.
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
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/gateway"
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

// The example enqueue routes: route name, path and task.
var EnqueueRoutes = []struct{ Name, Path, Task string }{
	{"invoices", "/v1/invoices", enqueue.TaskInvoiceCreate},
	{"inventory", "/v1/inventory/adjustments", enqueue.TaskInventoryAdjust},
	{"charges", "/v1/payments/charges", enqueue.TaskPaymentCharge},
	{"notifications", "/v1/notifications", enqueue.TaskNotificationSend},
}

func sum(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

// Options returns the gateway's options: api_key auth for the three
// tenants, the admin token, the enqueue routes on jobs, store, and
// openapi.Spec at /openapi.yaml.
func Options(jobs gateway.Jobs, store idempotency.Store) gateway.Options {
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
		OpenAPI:          openapi.Spec,
		OpenAPIJSON:      openapi.SpecJSON,
		Logger:           slog.New(slog.DiscardHandler),
	}
	for _, r := range EnqueueRoutes {
		opts.Routes = append(opts.Routes, gateway.RouteOptions{
			Name: r.Name, Methods: []string{"POST"}, Path: r.Path,
			Enqueue: &gateway.EnqueueOptions{Task: r.Task, Queue: "default"},
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

// Jobs is an in-memory gateway.Jobs. Submit validates the body with
// enqueue.Decode and, like the real job store, returns the existing job
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
	p, err := enqueue.Decode(req.Task, req.Body)
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
		ID: id, Task: req.Task, Status: enqueue.StatusQueued, CreatedAt: now, UpdatedAt: now,
		Tenant: req.Tenant, Route: req.Route, IdempotencyKey: req.Key, Queue: req.Queue,
		BusinessKey: p.BusinessKey(), Payload: append([]byte(nil), req.Body...),
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
