package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
)

// TestHeadAnswersLikeGet: load balancers and uptime checks probe with
// HEAD; every GET endpoint answers it with the GET's status and headers
// and no body, and HEAD where no GET is served is still 404.
func TestHeadAnswersLikeGet(t *testing.T) {
	t.Parallel()
	rec := job.Row{ID: "job_1", Task: "invoice.create", Status: job.StatusQueued, Tenant: "acme"}
	opts := testOptions(fakeJobs{get: func(_ context.Context, tenant, id string) (job.Row, error) {
		if tenant != rec.Tenant || id != rec.ID {
			return job.Row{}, job.ErrNotFound
		}
		return rec, nil
	}})
	opts.Ready = []Check{{Name: "postgres", Check: func(context.Context) error { return nil }}}
	g := newTestGateway(t, opts)
	// A real server: net/http, not the handler, drops a HEAD's body.
	public, adm := httptest.NewServer(g.Handler()), httptest.NewServer(g.AdminHandler())
	t.Cleanup(public.Close)
	t.Cleanup(adm.Close)
	user := []string{"Authorization", "Bearer " + testAPIKey}
	admin := []string{"Authorization", "Bearer " + testAdminToken}
	tests := []struct {
		name   string
		srv    *httptest.Server
		path   string
		header []string
		status int
	}{
		{"healthz", public, "/healthz", nil, http.StatusOK},
		{"readyz", public, "/readyz", nil, http.StatusOK},
		{"job", public, "/v1/jobs/job_1", user, http.StatusOK},
		{"unknown job", public, "/v1/jobs/job_2", user, http.StatusNotFound},
		{"job without credentials", public, "/v1/jobs/job_1", nil, http.StatusUnauthorized},
		{"POST-only route", public, "/v1/invoices", user, http.StatusNotFound},
		{"no route", public, "/nothing", nil, http.StatusNotFound},
		{"metrics", adm, "/metrics", admin, http.StatusOK},
		{"metrics without the token", adm, "/metrics", nil, http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			get, getBody := fetch(t, tc.srv, http.MethodGet, tc.path, tc.header...)
			head, headBody := fetch(t, tc.srv, http.MethodHead, tc.path, tc.header...)
			if get.StatusCode != tc.status {
				t.Fatalf("GET %s: %d, want %d", tc.path, get.StatusCode, tc.status)
			}
			if head.StatusCode != tc.status {
				t.Errorf("HEAD %s: %d, want %d (the GET's)", tc.path, head.StatusCode, tc.status)
			}
			if ct := head.Header.Get("Content-Type"); ct != get.Header.Get("Content-Type") {
				t.Errorf("HEAD %s: Content-Type %q, the GET's is %q", tc.path, ct, get.Header.Get("Content-Type"))
			}
			if getBody == "" {
				t.Errorf("GET %s has no body to leave out", tc.path)
			}
			if headBody != "" {
				t.Errorf("HEAD %s has a body: %q", tc.path, headBody)
			}
		})
	}
}

// fetch sends one request to srv and reads the answer.
func fetch(t *testing.T, srv *httptest.Server, method, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp, string(b)
}

// TestUnauthorizedChallenges: a 401 says how to authenticate (RFC 9110
// §11.6.1): a Bearer challenge for an API key on the public listener, the
// admin realm on the admin listener. In header mode a trusted proxy, not
// the client, names the tenant, so there is nothing to challenge.
func TestUnauthorizedChallenges(t *testing.T) {
	t.Parallel()
	jobs := fakeJobs{get: func(context.Context, string, string) (job.Row, error) {
		return job.Row{}, errors.New("not reached")
	}}
	g := newTestGateway(t, testOptions(jobs))
	headerMode := testOptions(jobs)
	headerMode.Auth = auth.Config{Mode: auth.ModeHeader, Header: "Idemgate-Tenant", Tenants: []auth.TenantKeys{{Name: "acme"}}}
	hg := newTestGateway(t, headerMode)
	const public, adminRealm = `Bearer realm="idemgate"`, `Bearer realm="idemgate-admin"`
	tests := []struct {
		name, method, path string
		h                  http.Handler
		header             []string
		status             int
		want               string
	}{
		{"enqueue route without a key", http.MethodPost, "/v1/invoices", g.Handler(), nil, http.StatusUnauthorized, public},
		{"enqueue route with a wrong key", http.MethodPost, "/v1/invoices", g.Handler(), []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized, public},
		{"job without a key", http.MethodGet, "/v1/jobs/job_1", g.Handler(), nil, http.StatusUnauthorized, public},
		{"admin API", http.MethodGet, "/admin/keys/acme/invoices/k", g.AdminHandler(), []string{"Authorization", "Bearer " + testAPIKey}, http.StatusUnauthorized, adminRealm},
		{"not found is no challenge", http.MethodGet, "/nothing", g.Handler(), nil, http.StatusNotFound, ""},
		{"header mode", http.MethodGet, "/v1/jobs/job_1", hg.Handler(), nil, http.StatusUnauthorized, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := serve(t, tc.h, tc.method, tc.path, "", tc.header...)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s: %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.status, body)
			}
			if got := resp.Header.Values("WWW-Authenticate"); len(got) > 1 || resp.Header.Get("WWW-Authenticate") != tc.want {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.want)
			}
		})
	}
}
