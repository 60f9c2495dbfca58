package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/openapi"
)

// listGateway is a gateway on real PostgreSQL and Redis with tenants acme
// and globex and two enqueue routes, /v1/invoices (invoice.create) and
// /v1/shipments (shipment.book).
type listGateway struct {
	g    *Gateway
	pool *pgxpool.Pool
	run  string
}

const globexAPIKey = "globex-secret-key"

func newListGateway(t *testing.T) listGateway {
	t.Helper()
	pool := testkit.Pool(t)
	queue, _, qname := testkit.Queue(t, "list")
	opts := testOptions(job.NewSubmitter(pool, queue))
	opts.Auth.Tenants = append(opts.Auth.Tenants, auth.TenantKeys{Name: "globex", APIKeySHA256s: []string{hexSum(globexAPIKey)}})
	opts.Routes = []RouteOptions{
		{Name: "invoices", Methods: []string{http.MethodPost}, Path: "/v1/invoices", Enqueue: &EnqueueOptions{Spec: invoiceSpec, Queue: qname}},
		{Name: "shipments", Methods: []string{http.MethodPost}, Path: "/v1/shipments", Enqueue: &EnqueueOptions{Spec: shipmentSpec(t), Queue: qname}},
	}
	return listGateway{g: newTestGateway(t, opts), pool: pool, run: testkit.Prefix()}
}

// submit posts one job for the tenant whose API key is apiKey and returns
// its id.
func (lg listGateway) submit(t *testing.T, apiKey, path string, n int) string {
	t.Helper()
	body := fmt.Sprintf(`{"order_id":"o-%d","amount_cents":100,"currency":"EUR"}`, n)
	if path == "/v1/shipments" {
		body = fmt.Sprintf(`{"order_id":"o-%d","warehouse":"w-1","account":"a-1"}`, n)
	}
	resp, got := serve(t, lg.g.Handler(), http.MethodPost, path, body,
		"Authorization", "Bearer "+apiKey, "Idempotency-Key", fmt.Sprintf("%s%s-%d", lg.run, path, n), "Content-Type", "application/json")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, got)
	}
	var j openapi.Job
	if err := json.Unmarshal([]byte(got), &j); err != nil {
		t.Fatal(err)
	}
	return j.Id
}

// list GETs one page from h and decodes it; a status other than 200
// fails the test.
func list(t *testing.T, h http.Handler, authz, target string) openapi.JobList {
	t.Helper()
	resp, got := serve(t, h, http.MethodGet, target, "", "Authorization", authz)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, resp.StatusCode, got)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("GET %s: Cache-Control %q, want no-store", target, cc)
	}
	var page openapi.JobList
	if err := json.Unmarshal([]byte(got), &page); err != nil {
		t.Fatalf("GET %s: %v: %s", target, err, got)
	}
	return page
}

// listAll pages through target (which has a query) and returns every
// job id in order; between pages it calls between.
func listAll(t *testing.T, h http.Handler, authz, target string, between func()) []string {
	t.Helper()
	var ids []string
	next := target
	for range 1000 {
		page := list(t, h, authz, next)
		for _, j := range page.Items {
			ids = append(ids, j.Id)
		}
		if page.NextCursor == nil {
			return ids
		}
		next = target + "&cursor=" + url.QueryEscape(*page.NextCursor)
		if between != nil {
			between()
		}
	}
	t.Fatalf("GET %s: more than 1000 pages", target)
	return nil
}

// TestJobListPagesWhileJobsArrive: a tenant that pages through its jobs
// while it keeps submitting new ones sees each job that was there when it
// started exactly once, newest first, and never another tenant's. With
// offset paging every new job would push one already shown onto the next
// page.
func TestJobListPagesWhileJobsArrive(t *testing.T) {
	lg := newListGateway(t)
	acme := "Bearer " + testAPIKey
	var before []string
	for i := range 23 {
		before = append(before, lg.submit(t, testAPIKey, "/v1/invoices", i))
		if i%4 == 0 {
			lg.submit(t, globexAPIKey, "/v1/invoices", i)
		}
	}
	slices.Reverse(before) // newest first
	n := 100
	got := listAll(t, lg.g.Handler(), acme, "/v1/jobs?limit=4", func() {
		for range 3 {
			lg.submit(t, testAPIKey, "/v1/invoices", n)
			n++
		}
	})
	if !slices.Equal(got, before) {
		t.Fatalf("pages of 4 while 3 jobs arrive between pages:\n got %v\nwant %v", got, before)
	}
	// The jobs that arrived are on top of a new listing; globex's are in
	// none of acme's.
	all := listAll(t, lg.g.Handler(), acme, "/v1/jobs?limit=500", nil)
	if len(all) != 23+(n-100) || !slices.Equal(all[n-100:], before) {
		t.Errorf("a new listing: %d jobs, want the %d new ones on top of the %d", len(all), n-100, len(before))
	}
	globex := listAll(t, lg.g.Handler(), "Bearer "+globexAPIKey, "/v1/jobs?limit=2", nil)
	if len(globex) != 6 {
		t.Errorf("globex lists %d jobs, want its own 6", len(globex))
	}
	for _, id := range globex {
		if slices.Contains(all, id) {
			t.Errorf("globex's job %s is in acme's list", id)
		}
	}
}

// TestJobListFilters: each filter of GET /v1/jobs and GET /admin/jobs
// selects what it names, as the job documents show it.
func TestJobListFilters(t *testing.T) {
	lg := newListGateway(t)
	ctx := t.Context()
	inv := make([]string, 4)
	for i := range inv {
		inv[i] = lg.submit(t, testAPIKey, "/v1/invoices", i)
	}
	ship := lg.submit(t, testAPIKey, "/v1/shipments", 10)
	other := lg.submit(t, globexAPIKey, "/v1/invoices", 20)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := lg.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for i, id := range append(slices.Clone(inv), ship, other) {
		exec(`UPDATE jobs SET created_at = $2 WHERE id = $1`, id, base.Add(time.Duration(i)*time.Hour))
	}
	exec(`UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = $1`, inv[0])
	exec(`UPDATE jobs SET status = 'scheduled', not_before = now() - interval '1 second' WHERE id = $1`, inv[1]) // due: queued
	exec(`UPDATE jobs SET status = 'scheduled', not_before = now() + interval '1 hour' WHERE id = $1`, inv[2])
	exec(`UPDATE jobs SET status = 'succeeded', finished_at = now() WHERE id = $1`, inv[3])

	h, acme := lg.g.Handler(), "Bearer "+testAPIKey
	admin, token := lg.g.AdminHandler(), "Bearer "+testAdminToken
	ids := func(h http.Handler, authz, target string) []string { return listAll(t, h, authz, target, nil) }
	for _, tc := range []struct {
		name  string
		admin bool
		query string
		want  []string
	}{
		{"no filter", false, "", []string{ship, inv[3], inv[2], inv[1], inv[0]}},
		{"failed", false, "status=failed", []string{inv[0]}},
		{"queued, a due scheduled job included", false, "status=queued", []string{ship, inv[1]}},
		{"scheduled, not yet due", false, "status=scheduled", []string{inv[2]}},
		{"task", false, "task=shipment.book", []string{ship}},
		{"task and status", false, "task=invoice.create&status=succeeded", []string{inv[3]}},
		{"created_after", false, "created_after=" + url.QueryEscape(base.Add(2*time.Hour).Format(time.RFC3339)), []string{ship, inv[3]}},
		{"created_before", false, "created_before=2026-11-01T13:00:00%2B00:00", []string{inv[0]}},
		{"created between", false, "created_after=2026-11-01T12:00:00Z&created_before=2026-11-01T15:30:00Z", []string{inv[3], inv[2], inv[1]}},
		{"an unknown task", false, "task=no.such", nil},
		{"admin, every tenant", true, "", []string{other, ship, inv[3], inv[2], inv[1], inv[0]}},
		{"admin, one tenant", true, "tenant=globex", []string{other}},
		{"admin, one tenant and status", true, "tenant=acme&status=queued", []string{ship, inv[1]}},
		{"admin, a tenant without jobs", true, "tenant=initech", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []string{"1", "50"} {
				target := "/v1/jobs?limit=" + limit + "&" + tc.query
				got := []string(nil)
				if tc.admin {
					got = ids(admin, token, strings.Replace(target, "/v1/", "/admin/", 1))
				} else {
					got = ids(h, acme, target)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("limit %s: %v, want %v", limit, got, tc.want)
				}
			}
		})
	}
	// A page's items are the job documents GET /v1/jobs/{id} shows.
	page := list(t, h, acme, "/v1/jobs?status=queued&limit=1")
	_, one := serve(t, h, http.MethodGet, "/v1/jobs/"+inv[1], "", "Authorization", acme)
	var doc openapi.Job
	if err := json.Unmarshal([]byte(one), &doc); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].Id != ship {
		t.Fatalf("first queued job %+v", page.Items)
	}
	second := list(t, h, acme, "/v1/jobs?status=queued&limit=1&cursor="+url.QueryEscape(*page.NextCursor))
	if len(second.Items) != 1 || !jsonEqual(t, second.Items[0], doc) || second.NextCursor != nil {
		t.Errorf("second page %+v (next %v), want the job document %+v and no next page", second.Items, second.NextCursor, doc)
	}
	if doc.Status != openapi.JobStatusQueued {
		t.Errorf("the due scheduled job reads %s, want queued", doc.Status)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// TestJobListRefusals: a list's wrong parameters are one 400 bad-request
// naming each of them, on both endpoints; a tenant= on the tenant's own
// endpoint is refused, not ignored.
func TestJobListRefusals(t *testing.T) {
	lg := newListGateway(t)
	for _, tc := range []struct {
		query  string
		admin  bool
		fields []string
	}{
		{"status=done", false, []string{"status"}},
		{"limit=0", false, []string{"limit"}},
		{"limit=501", true, []string{"limit"}},
		{"limit=ten", false, []string{"limit"}},
		{"cursor=not-a-cursor", false, []string{"cursor"}},
		{"cursor=" + url.QueryEscape("1765000000000000.job_1"), true, []string{"cursor"}},
		{"created_after=yesterday", false, []string{"created_after"}},
		{"created_before=2026-12-01T00:00:00", false, []string{"created_before"}},
		{"created_after=2026-12-02T00:00:00Z&created_before=2026-12-01T00:00:00Z", false, []string{"created_after"}},
		{"status=queued&status=failed", false, []string{"status"}},
		{"task=", false, []string{"task"}},
		{"tenant=globex", false, []string{"tenant"}},
		{"tenant=a%2Fb", true, []string{"tenant"}},
		{"status=done&limit=0&created_after=x", true, []string{"status", "created_after", "limit"}},
	} {
		h, authz, path := lg.g.Handler(), "Bearer "+testAPIKey, "/v1/jobs?"
		if tc.admin {
			h, authz, path = lg.g.AdminHandler(), "Bearer "+testAdminToken, "/admin/jobs?"
		}
		resp, got := serve(t, h, http.MethodGet, path+tc.query, "", "Authorization", authz)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s%s: %d %s, want 400 problem+json", path, tc.query, resp.StatusCode, got)
			continue
		}
		p := decodeBody(t, got)
		var fields []string
		if p.Errors != nil {
			for _, e := range *p.Errors {
				fields = append(fields, e.Field)
			}
		}
		if p.Type != "https://idemgate.dev/problems/bad-request" || !slices.Equal(fields, tc.fields) {
			t.Errorf("%s%s: %s, want bad-request naming %v", path, tc.query, got, tc.fields)
		}
	}
	// Without credentials, the tenant's list is 401.
	if resp, _ := serve(t, lg.g.Handler(), http.MethodGet, "/v1/jobs", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/jobs without credentials: %d, want 401", resp.StatusCode)
	}
	if resp, _ := serve(t, lg.g.AdminHandler(), http.MethodGet, "/admin/jobs", "", "Authorization", "Bearer "+testAPIKey); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /admin/jobs with a tenant's key: %d, want 401", resp.StatusCode)
	}
}
