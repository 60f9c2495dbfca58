package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/job"
)

// search asks the console's search for q (and more query parameters)
// and returns the answer's status, where a 303 goes, and the page.
func (v *env) search(t *testing.T, q string, more ...string) (int, string, *html.Node) {
	t.Helper()
	qs := url.Values{"q": {q}}
	for i := 0; i+1 < len(more); i += 2 {
		qs.Set(more[i], more[i+1])
	}
	resp, body := v.adminDo(t, http.MethodGet, "/admin/ui/search?"+qs.Encode())
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Location"), doc
}

func jobIDs(doc *html.Node) []string {
	var ids []string
	for _, row := range find(doc, func(n *html.Node) bool { return hasClass(n, "job") && n.Data == "tr" }) {
		id, _ := attr(row, "data-id")
		ids = append(ids, id)
	}
	return ids
}

// The search box goes straight to the one job a job id, an idempotency
// key, a business key or a payload field names, and lists the jobs when
// several match (one key used by two tenants).
func TestSearchFindsAJobByEachKind(t *testing.T) {
	v := setup(t)
	a := v.invoice(t, "acme", "inv-s1", "o-s1")
	b := v.invoice(t, "globex", "inv-s2", "o-s2")
	c := v.invoice(t, "globex", "inv-s1", "o-s3")
	rb, err := v.records.ByID(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, q, want string }{
		{"job id", a, a},
		{"idempotency key", "inv-s2", b},
		{"business key", rb.BusinessKey, b},
		{"payload field", "order_id=o-s3", c},
	} {
		status, loc, _ := v.search(t, tc.q)
		if status != http.StatusSeeOther || loc != "/admin/ui/jobs/"+url.PathEscape(tc.want) {
			t.Errorf("search by %s %q: %d to %q, want 303 to job %s", tc.name, tc.q, status, loc, tc.want)
		}
	}
	status, _, doc := v.search(t, "inv-s1")
	if ids := jobIDs(doc); status != http.StatusOK || len(ids) != 2 || !(ids[0] == c && ids[1] == a) {
		t.Errorf("search by a key two tenants used: %d %v, want both jobs, newest first (%s, %s)", status, ids, c, a)
	}
	d := v.invoice(t, "acme", "ref=77", "o-s4")
	if status, loc, _ := v.search(t, "ref=77"); status != http.StatusSeeOther || loc != "/admin/ui/jobs/"+url.PathEscape(d) {
		t.Errorf("search by a key holding '=': %d to %q, want job %s", status, loc, d)
	}
	status, _, doc = v.search(t, "no-such-thing")
	if status != http.StatusOK || !strings.Contains(text(byID(doc, "search-summary")), "No job") {
		t.Errorf("search for nothing: %d %q", status, text(byID(doc, "search-summary")))
	}
	if status, _, doc = v.search(t, "order_id=o-s1", "within", "1000h"); status != http.StatusBadRequest {
		t.Errorf("a payload window past 7 days: %d, want 400 (%s)", status, text(byID(doc, "flash")))
	}
	// Every page carries the search box.
	for _, p := range []string{"/admin/ui/", "/admin/ui/jobs", "/admin/ui/keys", "/admin/ui/jobs/" + url.PathEscape(a)} {
		if byID(v.page(t, p), "search-q") == nil {
			t.Errorf("page %s has no search box", p)
		}
	}
}

// A payload search reads only its window of jobs, and a search with more
// matches than a page says it shows only the newest ones.
func TestSearchIsBounded(t *testing.T) {
	v := setup(t)
	if _, err := v.pool.Exec(t.Context(), `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, created_at, updated_at)
VALUES ('job_old', 'acme', 'invoices', 'old-1', 'invoice.create', 'default', 'invoice:o-old', '{"order_id":"o-old","n":42}', 'succeeded', 1,
        now() - interval '2 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	if _, err := v.pool.Exec(t.Context(), `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, last_error)
SELECT 'job_many' || i, 'acme', 'invoices', 'many-' || i, 'invoice.create', 'default', 'invoice:many', '{}', 'failed', 3, 'upstream said 502'
  FROM generate_series(1, 51) i`); err != nil {
		t.Fatal(err)
	}
	status, _, doc := v.search(t, "order_id=o-old")
	if status != http.StatusOK || len(jobIDs(doc)) != 0 {
		t.Errorf("a job created 2 days ago found in the default window: %d %v", status, jobIDs(doc))
	}
	if status, loc, _ := v.search(t, "n=42", "within", "72h"); status != http.StatusSeeOther || loc != "/admin/ui/jobs/job_old" {
		t.Errorf("the same search within 72h (a number): %d %q, want the job", status, loc)
	}
	// A window holding more jobs than a payload search reads: it reads
	// the newest ones and says so.
	if _, err := v.pool.Exec(t.Context(), `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, created_at, updated_at)
SELECT 'job_scan' || i, 'acme', 'invoices', 'scan-' || i, 'invoice.create', 'default', 'invoice:scan-' || i,
       CASE WHEN i = 1 THEN '{"order_id":"o-past"}'::jsonb ELSE '{}'::jsonb END, 'succeeded', 1,
       now() - make_interval(secs => CASE WHEN i = 1 THEN 1800 ELSE i % 600 END), now()
  FROM generate_series(1, $1::int + 1) i`, job.PayloadScan); err != nil {
		t.Fatal(err)
	}
	status, _, doc = v.search(t, "order_id=o-past")
	if status != http.StatusOK || len(jobIDs(doc)) != 0 || byID(doc, "search-scan-bound") == nil {
		t.Errorf("a match past the newest %d jobs: %d %v, scan-bound note %v; want no match and the note", job.PayloadScan, status, jobIDs(doc), byID(doc, "search-scan-bound") != nil)
	}
	status, _, doc = v.search(t, "invoice:many")
	if status != http.StatusOK || len(jobIDs(doc)) != 50 || byID(doc, "search-capped") == nil {
		t.Errorf("51 jobs on a business key: %d, %d rows, capped note %v; want 50 and the note", status, len(jobIDs(doc)), byID(doc, "search-capped") != nil)
	}
	// The rows show the business key and the last error.
	row := find(doc, func(n *html.Node) bool { return hasClass(n, "job") && n.Data == "tr" })[0]
	if bk := text(find(row, func(n *html.Node) bool { return hasClass(n, "business-key") })[0]); bk != "invoice:many" {
		t.Errorf("business key cell %q", bk)
	}
	if e := text(find(row, func(n *html.Node) bool { return hasClass(n, "last-error") })[0]); e != "upstream said 502" {
		t.Errorf("last error cell %q", e)
	}
}

// The jobs list filters by a time range, and its address (deep link)
// carries the filters to the next page.
func TestJobsListTimeRange(t *testing.T) {
	v := setup(t)
	if _, err := v.pool.Exec(t.Context(), `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, created_at, updated_at)
SELECT 'job_t' || lpad(i::text, 3, '0'), 'acme', 'invoices', 't-' || i, 'invoice.create', 'default', 'invoice:t-' || i, '{}', 'succeeded', 1,
       timestamptz '2026-03-01 00:00:00Z' + make_interval(hours => i), now()
  FROM generate_series(1, 120) i`); err != nil {
		t.Fatal(err)
	}
	// Hours 10 to 69 exclusive of both ends: 59 jobs, two pages.
	path := "/admin/ui/jobs?" + url.Values{"created_after": {"2026-03-01T10:00:00"}, "created_before": {"2026-03-03T22:00"}}.Encode()
	var ids []string
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("the list does not end")
		}
		doc := v.page(t, path)
		ids = append(ids, jobIDs(doc)...)
		path = ""
		if a := byID(doc, "next-page"); a != nil {
			path, _ = attr(a, "href")
			if !strings.Contains(path, "created_after=") || !strings.Contains(path, "created_before=") {
				t.Errorf("next page %q lost the time range", path)
			}
		}
	}
	if len(ids) != 59 || ids[0] != "job_t069" || ids[58] != "job_t011" {
		t.Errorf("time range: %d jobs from %v to %v, want 59 from job_t069 to job_t011", len(ids), first(ids), last(ids))
	}
	if resp, _ := v.adminDo(t, http.MethodGet, "/admin/ui/jobs?created_after=yesterday"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad time: %d, want 400", resp.StatusCode)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// The list's relative times carry the absolute time (RFC 3339) on hover,
// ids carry a copy button, and every page a dark-mode toggle whose
// styles the stylesheet has.
func TestPolish(t *testing.T) {
	v := setup(t)
	id := v.invoice(t, "acme", "inv-p1", "o-p1")
	doc := v.page(t, "/admin/ui/jobs")
	tm := find(byID(doc, "jobs"), func(n *html.Node) bool { return n.Data == "time" })
	if len(tm) == 0 {
		t.Fatal("no time in the jobs list")
	}
	title, _ := attr(tm[0], "title")
	if _, err := time.Parse(time.RFC3339, title); err != nil {
		t.Errorf("time title %q is not RFC 3339: %v", title, err)
	}
	if byID(doc, "theme-toggle") == nil {
		t.Error("no dark-mode toggle")
	}
	doc = v.page(t, "/admin/ui/jobs/"+url.PathEscape(id))
	if b := byID(doc, "copy-job-id"); b == nil {
		t.Error("the job page has no copy button on its id")
	} else if c, _ := attr(b, "data-copy"); c != id {
		t.Errorf("copy button copies %q, want %q", c, id)
	}
	resp, css := v.adminDo(t, http.MethodGet, "/admin/ui/static/console.css")
	if resp.StatusCode != http.StatusOK || !strings.Contains(css, `:root[data-theme="dark"]`) || !strings.Contains(css, "max-width: 900px") {
		t.Error("the stylesheet has no dark theme or no narrow layout")
	}
}
