package openapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/openapi"
)

// exampleConfig is the configuration whose enqueue routes the
// description documents.
const exampleConfig = "../deploy/local/idemgate.yaml"

// notServedYet are documented operations the gateway does not answer yet,
// with why. Remove an entry once the gateway serves it.
var notServedYet = map[string]string{}

// samples fills a documented path's parameters.
var samples = strings.NewReplacer(
	"{id}", "job_00000000000000000000000000000000",
	"{tenant}", gatewaytest.Tenant, "{route}", "invoices", "{key}", "parity-key",
)

// startExample starts the gateway with every route of the example
// configuration (its enqueue routes on gatewaytest's in-memory queue, its
// proxied routes in front of an upstream that answers 418, which the
// description never documents), with pprof on and a handler mounted on
// the admin listener as the queue UI is: everything the gateway can
// register. It returns the document such a gateway serves: the embedded
// one with the configuration's enqueue routes.
func startExample(t *testing.T) (*gatewaytest.Server, *openapi3.T) {
	t.Helper()
	// The demo's file sets worker.partner_url, a key its program claims.
	// The description does not depend on it, so any value passes.
	partnerURL := extension.Setting{Key: "worker.partner_url", Set: func(string) string { return "" }}
	cfg, err := config.Load(exampleConfig, func(string) string { return "" }, config.WithSettings(partnerURL))
	if err != nil {
		t.Fatalf("%s: %v", exampleConfig, err)
	}
	teapot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(teapot.Close)
	up, _ := url.Parse(teapot.URL)

	opts := gatewaytest.Options(gatewaytest.NewQueue(), memstore.New())
	opts.Routes = nil
	opts.Pprof = true
	var (
		enqueued []gatewaytest.EnqueueRoute
		routes   []openapi.JobRoute
	)
	for _, r := range cfg.Routes {
		ro := gateway.RouteOptions{Name: r.Name, Methods: r.Methods, Path: r.Path}
		if r.PathPrefix != "" {
			ro.Path, ro.Prefix = r.PathPrefix, true
		}
		switch {
		case r.Enqueue != nil:
			spec, ok := cfg.Job(r.Enqueue.Task)
			if !ok {
				t.Fatalf("%s: route %s enqueues %s, which is not declared", exampleConfig, r.Name, r.Enqueue.Task)
			}
			ro.Enqueue = &gateway.EnqueueOptions{Spec: spec, Queue: r.Enqueue.Queue}
			routes = append(routes, openapi.JobRoute{Name: r.Name, Path: ro.Path, Prefix: ro.Prefix, Methods: r.Methods, Task: spec.Task, Schema: spec.Schema.JSON()})
			enqueued = append(enqueued, gatewaytest.EnqueueRoute{Name: r.Name, Path: ro.Path, Task: spec.Task,
				Schema: spec.Schema.JSON(), BusinessKey: spec.BusinessKey.String(), Resource: spec.Resource.String()})
		default:
			ro.Upstream = up
		}
		opts.Routes = append(opts.Routes, ro)
	}
	yamlDoc, jsonDoc, err := openapi.WithJobRoutes(openapi.Spec, routes)
	if err != nil {
		t.Fatalf("%s: the enqueue routes cannot be described: %v", exampleConfig, err)
	}
	opts.OpenAPI, opts.OpenAPIJSON = yamlDoc, jsonDoc
	// The other tests run gatewaytest's copy of these routes and jobs.
	if !sameRoutes(gatewaytest.EnqueueRoutes(), enqueued) {
		t.Errorf("gatewaytest.EnqueueRoutes()\n%s\ndiffer from the enqueue routes and jobs of %s\n%s",
			describeRoutes(gatewaytest.EnqueueRoutes()), exampleConfig, describeRoutes(enqueued))
	}
	srv := gatewaytest.Start(t, opts)
	srv.Gateway.AdminMount("/admin/queues", http.NotFoundHandler())
	return srv, loadDoc(t, jsonDoc)
}

// sameRoutes compares enqueue routes, their schemas as JSON values.
func sameRoutes(a, b []gatewaytest.EnqueueRoute) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		var sa, sb any
		if json.Unmarshal(a[i].Schema, &sa) != nil || json.Unmarshal(b[i].Schema, &sb) != nil || !reflect.DeepEqual(sa, sb) {
			return false
		}
		x, y := a[i], b[i]
		x.Schema, y.Schema = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func describeRoutes(rs []gatewaytest.EnqueueRoute) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %s %s %s key %q resource %q schema %s\n", r.Name, r.Path, r.Task, r.BusinessKey, r.Resource, compact(r.Schema))
	}
	return b.String()
}

func compact(doc json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return string(doc)
	}
	return b.String()
}

// startDefault starts gatewaytest's gateway, which has the example
// configuration's enqueue routes and serves their description.
func startDefault(t *testing.T) *gatewaytest.Server {
	t.Helper()
	return gatewaytest.Start(t, gatewaytest.Options(gatewaytest.NewQueue(), memstore.New()))
}

// onAdmin reports whether a documented path is served on the admin
// listener: such a path has servers of its own.
func onAdmin(item *openapi3.PathItem) bool { return len(item.Servers) > 0 }

// TestEveryRegisteredRouteIsDocumented: every endpoint the gateway
// registers itself, and every enqueue route of the example configuration,
// is in the description it serves with its method, on the listener it is served
// on; what is served beside the API (pprof, the queue UI) is not; proxied
// routes are their upstream's API.
func TestEveryRegisteredRouteIsDocumented(t *testing.T) {
	t.Parallel()
	srv, doc := startExample(t)
	kinds := map[gateway.EndpointKind]int{}
	for _, l := range []struct {
		admin bool
		eps   []gateway.Endpoint
	}{{false, srv.Gateway.PublicRoutes()}, {true, srv.Gateway.AdminRoutes()}} {
		for _, ep := range l.eps {
			kinds[ep.Kind]++
			name := ep.Method + " " + ep.Path
			item := doc.Paths.Value(ep.Path)
			switch ep.Kind {
			case gateway.KindAPI, gateway.KindEnqueue:
				if ep.Method == "*" || ep.Prefix {
					t.Errorf("%s (%s) takes every method or path below it: the description cannot document it", name, ep.Kind)
					continue
				}
				if item == nil || item.GetOperation(ep.Method) == nil {
					t.Errorf("%s (%s) is registered but not documented", name, ep.Kind)
					continue
				}
				if onAdmin(item) != l.admin {
					t.Errorf("%s: served on the admin listener: %v; the description says %v", name, l.admin, onAdmin(item))
				}
			case gateway.KindTool:
				if item != nil {
					t.Errorf("%s is served beside the API, yet documented as part of it", name)
				}
			}
		}
	}
	// The walk found each kind the example registers.
	for _, k := range []gateway.EndpointKind{gateway.KindAPI, gateway.KindEnqueue, gateway.KindProxy, gateway.KindTool} {
		if kinds[k] == 0 {
			t.Errorf("no %s endpoint is listed", k)
		}
	}
}

// TestEveryDocumentedOperationIsRegistered: every operation in the
// served description is registered on the listener it names, as the gateway's own
// endpoint or as an enqueue route of the example configuration.
func TestEveryDocumentedOperationIsRegistered(t *testing.T) {
	t.Parallel()
	srv, doc := startExample(t)
	registered := map[bool]map[string]gateway.EndpointKind{false: {}, true: {}}
	for admin, eps := range map[bool][]gateway.Endpoint{false: srv.Gateway.PublicRoutes(), true: srv.Gateway.AdminRoutes()} {
		for _, ep := range eps {
			registered[admin][ep.Method+" "+ep.Path] = ep.Kind
		}
	}
	for _, path := range slices.Sorted(mapKeys(doc.Paths.Map())) {
		item := doc.Paths.Value(path)
		for method := range item.Operations() {
			name := method + " " + path
			if _, ok := notServedYet[name]; ok {
				continue
			}
			kind, ok := registered[onAdmin(item)][name]
			if !ok {
				t.Errorf("%s is documented but the gateway registers no such endpoint on that listener", name)
				continue
			}
			if kind != gateway.KindAPI && kind != gateway.KindEnqueue {
				t.Errorf("%s is documented, but what serves it is a %s route", name, kind)
			}
		}
	}
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
func probe(t *testing.T, srv *gatewaytest.Server, admin bool, method, path string) exchange {
	t.Helper()
	base, token := srv.Public.URL, gatewaytest.APIKey
	if admin {
		base, token = srv.Admin.URL, gatewaytest.AdminToken
	}
	return send(t, srv.Public.Client(), newRequest(t, method, base+samples.Replace(path), "", "Authorization", bearer(token)))
}

// TestEveryDocumentedOperationIsServed: the gateway answers every
// documented operation with a status the description documents for it.
func TestEveryDocumentedOperationIsServed(t *testing.T) {
	t.Parallel()
	srv, doc := startExample(t)
	for _, path := range slices.Sorted(mapKeys(doc.Paths.Map())) {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			name := method + " " + path
			ex := probe(t, srv, onAdmin(item), method, path)
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

// TestUndocumentedMethodsAreNotServed: a documented path answers no
// method the description does not list, except HEAD where it lists GET,
// which answers as the GET does without a body (the description says
// so once, for every GET).
func TestUndocumentedMethodsAreNotServed(t *testing.T) {
	t.Parallel()
	srv, doc := startExample(t)
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	for _, path := range slices.Sorted(mapKeys(doc.Paths.Map())) {
		item := doc.Paths.Value(path)
		for _, method := range methods {
			if item.GetOperation(method) != nil {
				continue
			}
			ex := probe(t, srv, onAdmin(item), method, path)
			if method != http.MethodHead {
				if !isRouteTable404(ex) {
					t.Errorf("%s %s answered %d but is not documented: %s", method, path, ex.resp.StatusCode, ex.body)
				}
				continue
			}
			// No body to read a problem from: compare with the GET.
			want := http.StatusNotFound
			if item.Get != nil {
				want = probe(t, srv, onAdmin(item), http.MethodGet, path).resp.StatusCode
			}
			if ex.resp.StatusCode != want || len(ex.body) != 0 {
				t.Errorf("HEAD %s answered %d with %d bytes; want %d without a body", path, ex.resp.StatusCode, len(ex.body), want)
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
