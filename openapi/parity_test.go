package openapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/openapi/openapitest"
)

// servedByGateway is every endpoint the gateway serves itself:
// gateway.publicRoutes, gateway.adminRoutes (asynqmon and pprof are
// mounted beside the API and are not part of it) and the enqueue routes
// openapitest configures as deploy/local/idemgate.yaml does.
// TODO: take this from the gateway once it lists its routes.
var servedByGateway = []struct {
	admin        bool
	method, path string
}{
	{false, http.MethodGet, "/healthz"},
	{false, http.MethodGet, "/readyz"},
	{false, http.MethodGet, "/openapi.yaml"},
	{false, http.MethodGet, "/v1/jobs/{id}"},
	{true, http.MethodGet, "/metrics"},
	{true, http.MethodGet, "/admin/keys/{tenant}/{route}/{key}"},
	{true, http.MethodDelete, "/admin/keys/{tenant}/{route}/{key}"},
	{true, http.MethodPost, "/admin/keys/{tenant}/{route}/{key}/resolve"},
}

// notServedYet are documented operations the gateway does not answer yet,
// with why. Remove an entry once the gateway serves it.
var notServedYet = map[string]string{}

// samples fills a documented path's parameters.
var samples = strings.NewReplacer(
	"{id}", "job_00000000000000000000000000000000",
	"{tenant}", openapitest.Tenant, "{route}", "invoices", "{key}", "parity-key",
)

func startDefault(t *testing.T) *openapitest.Server {
	t.Helper()
	return openapitest.Start(t, openapitest.Options(openapitest.NewJobs(), memstore.New()))
}

// isRouteTable404 reports whether ex is the answer to a request that no
// endpoint or route matched, on either listener.
func isRouteTable404(ex exchange) bool {
	if ex.resp.StatusCode != http.StatusNotFound {
		return false
	}
	var p struct{ Type, Detail string }
	_ = json.Unmarshal(ex.body, &p)
	return p.Type == problemBase+"not-found" &&
		(strings.HasPrefix(p.Detail, "no route matches ") || strings.HasPrefix(p.Detail, "no admin endpoint "))
}

// probe asks the gateway for method on a documented path, with the
// credentials its listener needs.
func probe(t *testing.T, srv *openapitest.Server, admin bool, method, path string) exchange {
	t.Helper()
	base, token := srv.Public.URL, openapitest.APIKey
	if admin {
		base, token = srv.Admin.URL, openapitest.AdminToken
	}
	return send(t, srv.Public.Client(), newRequest(t, method, base+samples.Replace(path), "", "Authorization", bearer(token)))
}

// TestEveryDocumentedOperationIsServed: nothing in the description is
// missing from the gateway, and the gateway answers it with a documented
// status.
func TestEveryDocumentedOperationIsServed(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	srv := startDefault(t)
	for _, path := range slices.Sorted(mapKeys(doc.Paths.Map())) {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			name := method + " " + path
			ex := probe(t, srv, len(item.Servers) > 0, method, path)
			served := !isRouteTable404(ex)
			if why, ok := notServedYet[name]; ok {
				if served {
					t.Errorf("%s is served now: remove it from notServedYet", name)
				} else {
					t.Logf("%s: documented, not served: %s", name, why)
				}
				continue
			}
			if !served {
				t.Errorf("%s is documented but the gateway has no such endpoint: %s", name, ex.body)
				continue
			}
			if op.Responses.Status(ex.resp.StatusCode) == nil {
				t.Errorf("%s answered %d, which it does not document: %s", name, ex.resp.StatusCode, ex.body)
			}
		}
	}
}

// TestEveryServedEndpointIsDocumented: nothing the gateway serves itself
// is missing from the description, on the listener it says, and no
// documented path answers a method it does not document.
func TestEveryServedEndpointIsDocumented(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	served := servedByGateway
	for _, r := range openapitest.EnqueueRoutes {
		served = append(served, struct {
			admin        bool
			method, path string
		}{false, http.MethodPost, r.Path})
	}
	for _, s := range served {
		item := doc.Paths.Value(s.path)
		if item == nil || item.GetOperation(s.method) == nil {
			t.Errorf("%s %s is served but not documented", s.method, s.path)
			continue
		}
		if admin := len(item.Servers) > 0; admin != s.admin {
			t.Errorf("%s is on the admin listener: %v; the description says %v", s.path, s.admin, admin)
		}
	}

	srv := startDefault(t)
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	for _, path := range slices.Sorted(mapKeys(doc.Paths.Map())) {
		item := doc.Paths.Value(path)
		for _, method := range methods {
			if item.GetOperation(method) != nil {
				continue
			}
			ex := probe(t, srv, len(item.Servers) > 0, method, path)
			if method == http.MethodHead {
				// No body to read the problem from.
				if ex.resp.StatusCode != http.StatusNotFound {
					t.Errorf("HEAD %s answered %d but is not documented", path, ex.resp.StatusCode)
				}
				continue
			}
			if !isRouteTable404(ex) {
				t.Errorf("%s %s answered %d but is not documented: %s", method, path, ex.resp.StatusCode, ex.body)
			}
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
