package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestTableMatch(t *testing.T) {
	t.Parallel()
	post := map[string]bool{http.MethodPost: true}
	tbl := newTable([]*route{
		{name: "payments", methods: post, path: "/v1/payments", prefix: true},
		{name: "charges", methods: post, path: "/v1/payments/charges"},
		{name: "anything", path: "/v1", prefix: true},
		{name: "invoices", methods: post, path: "/v1/invoices"},
	})
	tests := []struct{ method, path, want string }{
		{"POST", "/v1/payments", "payments"},
		{"POST", "/v1/payments/pay_1", "payments"},
		{"POST", "/v1/payments/charges", "charges"},
		{"POST", "/v1/payments/charges/x", "payments"},
		{"POST", "/v1/paymentsX", "anything"},
		{"GET", "/v1/payments/charges", "anything"},
		{"POST", "/v1/invoices", "invoices"},
		{"POST", "/v1/invoices/1", "anything"},
		{"POST", "/v2", ""},
		{"GET", "/", ""},
	}
	for _, tc := range tests {
		got := ""
		if rt := tbl.match(tc.method, tc.path); rt != nil {
			got = rt.name
		}
		if got != tc.want {
			t.Errorf("%s %s matched %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestPublicRoutes(t *testing.T) {
	t.Parallel()
	opts := testOptions(fakeJobs{})
	opts.Routes = append(opts.Routes,
		RouteOptions{Name: "payments", Methods: []string{"post", "PATCH"}, Path: "/v1/payments", Prefix: true, Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}},
		RouteOptions{Name: "echo", Path: "/v1/echo", Handler: http.NotFoundHandler()},
	)
	g := newTestGateway(t, opts)
	want := []Endpoint{
		{Method: "GET", Path: "/healthz", Kind: KindAPI},
		{Method: "GET", Path: "/openapi.json", Kind: KindAPI},
		{Method: "GET", Path: "/openapi.yaml", Kind: KindAPI},
		{Method: "GET", Path: "/readyz", Kind: KindAPI},
		{Method: "GET", Path: "/v1/batches/{id}", Kind: KindAPI},
		{Method: "GET", Path: "/v1/jobs", Kind: KindAPI},
		{Method: "GET", Path: "/v1/jobs/{id}", Kind: KindAPI},
		{Method: "POST", Path: "/v1/jobs/{id}/cancel", Kind: KindAPI},
		{Method: "GET", Path: "/v1/schedules", Kind: KindAPI},
		{Method: "DELETE", Path: "/v1/schedules/{id}", Kind: KindAPI},
		{Method: "GET", Path: "/v1/schedules/{id}", Kind: KindAPI},
		{Method: "PUT", Path: "/v1/schedules/{id}", Kind: KindAPI},
		{Method: "POST", Path: "/v1/schedules/{id}/pause", Kind: KindAPI},
		{Method: "POST", Path: "/v1/schedules/{id}/resume", Kind: KindAPI},
		{Method: "POST", Path: "/v1/schedules/{id}/trigger", Kind: KindAPI},
		{Method: "POST", Path: "/v1/invoices", Kind: KindEnqueue, Route: "invoices"},
		{Method: "PATCH", Path: "/v1/payments", Prefix: true, Kind: KindProxy, Route: "payments"},
		{Method: "POST", Path: "/v1/payments", Prefix: true, Kind: KindProxy, Route: "payments"},
		{Method: "*", Path: "/v1/echo", Kind: KindHandler, Route: "echo"},
	}
	if got := g.PublicRoutes(); !slices.Equal(got, want) {
		t.Errorf("PublicRoutes:\n%s\nwant\n%s", endpoints(got), endpoints(want))
	}
}

func TestAdminRoutes(t *testing.T) {
	t.Parallel()
	opts := testOptions(fakeJobs{})
	opts.Pprof = true
	g := newTestGateway(t, opts)
	g.AdminMount("/admin/queues", http.NotFoundHandler())
	g.AdminMount("/admin/other", http.NotFoundHandler())
	want := []Endpoint{
		{Method: "*", Path: "/admin/other", Prefix: true, Kind: KindTool},
		{Method: "*", Path: "/admin/queues", Prefix: true, Kind: KindTool},
		{Method: "GET", Path: "/admin/fairness/{pool}", Kind: KindAPI},
		{Method: "PUT", Path: "/admin/fairness/{pool}", Kind: KindAPI},
		{Method: "GET", Path: "/admin/jobs", Kind: KindAPI},
		{Method: "POST", Path: "/admin/jobs/cancel", Kind: KindAPI},
		{Method: "POST", Path: "/admin/jobs/{id}/cancel", Kind: KindAPI},
		{Method: "DELETE", Path: "/admin/keys/{tenant}/{route}/{key}", Kind: KindAPI},
		{Method: "GET", Path: "/admin/keys/{tenant}/{route}/{key}", Kind: KindAPI},
		{Method: "POST", Path: "/admin/keys/{tenant}/{route}/{key}/resolve", Kind: KindAPI},
		{Method: "GET", Path: "/admin/limits/{name}", Kind: KindAPI},
		{Method: "POST", Path: "/admin/pause", Kind: KindAPI},
		{Method: "GET", Path: "/admin/pauses", Kind: KindAPI},
		{Method: "POST", Path: "/admin/resume", Kind: KindAPI},
		{Method: "POST", Path: "/admin/schedules/{id}/backfill", Kind: KindAPI},
		{Method: "*", Path: "/debug/pprof/", Prefix: true, Kind: KindTool},
		{Method: "*", Path: "/debug/pprof/cmdline", Kind: KindTool},
		{Method: "*", Path: "/debug/pprof/profile", Kind: KindTool},
		{Method: "*", Path: "/debug/pprof/symbol", Kind: KindTool},
		{Method: "*", Path: "/debug/pprof/trace", Kind: KindTool},
		{Method: "GET", Path: "/metrics", Kind: KindAPI},
	}
	if got := g.AdminRoutes(); !slices.Equal(got, want) {
		t.Errorf("AdminRoutes:\n%s\nwant\n%s", endpoints(got), endpoints(want))
	}
	// What is listed is what answers.
	for _, path := range []string{"/admin/queues/x", "/debug/pprof/cmdline"} {
		if resp, _ := serve(t, g.AdminHandler(), http.MethodGet, path, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, resp.StatusCode)
		}
	}
	if resp, _ := serve(t, g.AdminHandler(), http.MethodGet, "/debug/pprof/cmdline", "", "Authorization", "Bearer "+testAdminToken); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /debug/pprof/cmdline: %d, want 200", resp.StatusCode)
	}
}

func endpoints(eps []Endpoint) string {
	var b strings.Builder
	for _, ep := range eps {
		fmt.Fprintf(&b, "  %+v\n", ep)
	}
	return b.String()
}
