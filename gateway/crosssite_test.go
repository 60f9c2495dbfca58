package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
)

// Finding 11: in auth mode header a proxy in front may name the tenant
// from a cookie, which a browser adds to a cross-site form's POST by
// itself. With RefuseCrossSite (auth.cross_site: refuse, the default in
// that mode) such a request is refused with 403 forbidden before it
// cancels or creates anything; a request from the same site or origin,
// one typed in the address bar, one without a browser's headers (SDKs,
// curl) and a cross-site GET still go through.
func TestCrossSiteRefusedInHeaderMode(t *testing.T) {
	t.Parallel()
	e := startJobs(t, func(o *Options) {
		o.Auth = auth.Config{Mode: auth.ModeHeader, Header: "X-Tenant", Tenants: []auth.TenantKeys{{Name: "acme"}}}
		o.RefuseCrossSite = true
	})
	host := strings.TrimPrefix(e.srv.URL, "http://")
	tenant := []string{"X-Tenant", "acme"}
	form := []string{"Content-Type", "application/x-www-form-urlencoded"}

	victim := e.enqueue(t, "victim", tenant...)
	for i, tc := range []struct {
		name   string
		header []string
	}{
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site"}},
		{"cross-site form", []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}},
		{"foreign origin, no Sec-Fetch-Site", []string{"Origin", "http://evil.example"}},
	} {
		h := append(append(append([]string(nil), tenant...), form...), tc.header...)
		if r := e.do(http.MethodPost, "/v1/jobs/"+victim+"/cancel", "x=1", h...); r.status != http.StatusForbidden || r.slug() != "forbidden" {
			t.Errorf("%s: POST cancel: %d %s, want 403 forbidden", tc.name, r.status, r.body)
		}
		key := fmt.Sprintf("cross-%d", i)
		r := e.do(http.MethodPost, "/v1/invoices", `{"order_id":"x","amount_cents":1,"currency":"EUR"}`,
			append(append(append([]string(nil), tenant...), tc.header...), "Idempotency-Key", key, "Content-Type", "application/json")...)
		if r.status != http.StatusForbidden || r.slug() != "forbidden" {
			t.Errorf("%s: POST /v1/invoices: %d %s, want 403 forbidden", tc.name, r.status, r.body)
		}
		if _, err := e.records.Get(t.Context(), "acme", job.ID("acme", "invoices", key)); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("%s: a refused POST /v1/invoices created a job (%v)", tc.name, err)
		}
		if r := e.do(http.MethodGet, "/v1/jobs/"+victim, "", append(append([]string(nil), tenant...), tc.header...)...); r.status != http.StatusOK {
			t.Errorf("%s: GET (safe): %d %s, want 200", tc.name, r.status, r.body)
		}
	}
	if rec, err := e.records.Get(t.Context(), "acme", victim); err != nil || rec.Status != job.StatusQueued {
		t.Fatalf("the job after cross-site cancels: %q %v, want queued", rec.Status, err)
	}

	for i, tc := range []struct {
		name   string
		header []string
	}{
		{"no browser", nil},
		{"same origin", []string{"Origin", e.srv.URL}},
		{"same-origin fetch", []string{"Sec-Fetch-Site", "same-origin", "Origin", e.srv.URL}},
		{"same-site fetch", []string{"Sec-Fetch-Site", "same-site", "Origin", "http://app." + host}},
		{"typed in the address bar", []string{"Sec-Fetch-Site", "none"}},
	} {
		id := e.enqueue(t, fmt.Sprintf("ok-%d", i), append(append([]string(nil), tenant...), tc.header...)...)
		h := append(append([]string(nil), tenant...), tc.header...)
		if r := e.do(http.MethodPost, "/v1/jobs/"+id+"/cancel", "", h...); r.status != http.StatusOK || !strings.Contains(r.body, `"cancelled"`) {
			t.Errorf("%s: POST cancel: %d %s, want 200 cancelled", tc.name, r.status, r.body)
		}
	}
}
