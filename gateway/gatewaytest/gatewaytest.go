package gatewaytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/ratelimit"
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

func sum(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

// Options returns the gateway's options: api_key auth for the three
// tenants, the admin token, the example enqueue routes on jobs, store,
// and the description of those routes at /openapi.yaml and /openapi.json.
// A test that changes the enqueue routes serves what WithJobRoutes makes
// of its own.
func Options(jobs gateway.Submitter, store idempotency.Store) gateway.Options {
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
		Explainer:        &explain.Explainer{Keys: store, NoClaims: "store memory keeps no claim ledger"},
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
