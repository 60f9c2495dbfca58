package console_test

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// The pages show real data: the overview counts the requests by tenant and
// route and the jobs by status, the job page the job, its payload and its
// key, the key page its record and claims, the lists link to both.
func TestPagesShowWhatTheStoresHold(t *testing.T) {
	v := setup(t)
	id := v.invoice(t, "acme", "inv-1", "o-1")
	v.invoice(t, "acme", "inv-1", "o-1") // a replay
	v.call(t, "acme", "/v1/invoices", "inv-1", `{"order_id":"o-2","amount_cents":1,"currency":"EUR"}`)
	v.invoice(t, "globex", "inv-9", "o-9")

	doc := v.page(t, "/admin/ui/")
	if got := text(find(doc, func(n *html.Node) bool { return n.Data == "h1" })[0]); got != "Overview" {
		t.Errorf("overview h1 = %q", got)
	}
	rows := find(byID(doc, "requests"), func(n *html.Node) bool { _, ok := attr(n, "data-tenant"); return ok })
	counts := map[string]string{}
	for _, r := range rows {
		tenant, _ := attr(r, "data-tenant")
		route, _ := attr(r, "data-route")
		var cells []string
		for _, td := range find(r, func(n *html.Node) bool { return n.Data == "td" && hasClass(n, "num") }) {
			cells = append(cells, text(td))
		}
		counts[tenant+"/"+route] = strings.Join(cells, " ")
	}
	// new, replayed, 409, 422, released
	if counts["acme/invoices"] != "1 1 0 1 0" || counts["globex/invoices"] != "1 0 0 0 0" {
		t.Errorf("recent requests = %v, want acme/invoices 1 new, 1 replayed, 1 mismatch; globex/invoices 1 new", counts)
	}
	queued := find(byID(doc, "jobs-by-status"), func(n *html.Node) bool { s, _ := attr(n, "data-status"); return s == "queued" })
	if len(queued) != 1 || text(find(queued[0], func(n *html.Node) bool { return hasClass(n, "count") })[0]) != "2" {
		t.Errorf("jobs by status: queued row %v, want a count of 2", queued)
	}
	if byID(doc, "stuck-jobs") == nil || byID(doc, "queues-link") == nil {
		t.Error("overview without #stuck-jobs or #queues-link")
	}

	doc = v.page(t, "/admin/ui/jobs/"+id)
	if got := text(byID(doc, "job-status")); got != "queued" {
		t.Errorf("#job-status = %q, want queued", got)
	}
	if payload := text(byID(doc, "payload")); !strings.Contains(payload, `"order_id": "o-1"`) {
		t.Errorf("#payload = %q, want pretty JSON with the order", payload)
	}
	if d := text(byID(doc, "job-document")); !strings.Contains(d, id) {
		t.Errorf("#job-document = %q, want the job's document", d)
	}
	if byID(doc, "action-requeue") == nil || byID(doc, "action-cancel") == nil || byID(doc, "action-replay") != nil || byID(doc, "action-delete") != nil {
		t.Error("a queued job's page: want requeue and cancel only")
	}
	main := find(doc, func(n *html.Node) bool { return n.Data == "main" })[0]
	if live, _ := attr(main, "data-live"); live != "/admin/ui/jobs/"+id+"/live" {
		t.Errorf("main data-live = %q", live)
	}
	resp, body := v.adminDo(t, http.MethodGet, "/admin/ui/jobs/"+id+"/live")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"status":"queued"`) {
		t.Errorf("live: %d %s", resp.StatusCode, body)
	}

	doc = v.page(t, "/admin/ui/keys/acme/invoices/inv-1")
	if got := text(byID(doc, "record-state")); got != "completed" {
		t.Errorf("#record-state = %q, want completed", got)
	}
	claims := find(byID(doc, "claims"), func(n *html.Node) bool { return hasClass(n, "claim") })
	if len(claims) != 1 {
		t.Fatalf("%d claims, want 1", len(claims))
	}
	rec, err := v.store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "invoices", Key: "inv-1"})
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := attr(claims[0], "data-token"); tok != strconv.FormatInt(rec.FencingToken, 10) {
		t.Errorf("claim token %q, want the record's %d", tok, rec.FencingToken)
	}
	if got := text(byID(doc, "stored-status")); got != "202" {
		t.Errorf("#stored-status = %q, want 202", got)
	}

	doc = v.page(t, "/admin/ui/jobs?tenant=acme")
	jobs := find(byID(doc, "jobs"), func(n *html.Node) bool { return hasClass(n, "job") })
	if len(jobs) != 1 {
		t.Fatalf("acme's jobs: %d rows, want 1", len(jobs))
	}
	if got, _ := attr(jobs[0], "data-id"); got != id {
		t.Errorf("job row %q, want %s", got, id)
	}
	doc = v.page(t, "/admin/ui/keys?tenant=acme&route=invoices")
	keys := find(byID(doc, "keys"), func(n *html.Node) bool { return hasClass(n, "key") })
	if len(keys) != 1 {
		t.Fatalf("acme's invoice keys: %d rows, want 1", len(keys))
	}
	if k, _ := attr(keys[0], "data-key"); k != "inv-1" {
		t.Errorf("key row %q", k)
	}
	if s, _ := attr(keys[0], "data-state"); s != "completed" {
		t.Errorf("key state %q", s)
	}
	doc = v.page(t, "/admin/ui/keys?tenant=acme&route=invoices&state=in_flight")
	if n := len(find(byID(doc, "keys"), func(n *html.Node) bool { return hasClass(n, "key") })); n != 0 {
		t.Errorf("state=in_flight listed %d keys, want none", n)
	}

	// The lookup with all three redirects to the key's stable address,
	// each segment encoded once.
	resp, _ = v.adminDo(t, http.MethodGet, "/admin/ui/keys?tenant=acme&route=invoices&key="+url.QueryEscape("a/b%c"))
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/admin/ui/keys/acme/invoices/a%2Fb%25c" {
		t.Errorf("lookup: %d Location %q", resp.StatusCode, loc)
	}
}

// A stored body holding markup is shown as text: escaped, never run; the
// cookie the upstream set is masked.
func TestStoredBodyIsTextAndSecretsAreMasked(t *testing.T) {
	v := setup(t)
	if resp := v.call(t, "acme", "/v1/pages", "page-1", `{"title":"x"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("proxied call: %d", resp.StatusCode)
	}
	resp, body := v.adminDo(t, http.MethodGet, "/admin/ui/keys/acme/pages/page-1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("key page: %d", resp.StatusCode)
	}
	if strings.Contains(body, "<script>document.title") || strings.Contains(body, "<b>made") {
		t.Error("the stored body reached the page as markup")
	}
	if !strings.Contains(body, "&lt;script&gt;document.title") {
		t.Error("the stored body is not shown escaped")
	}
	if strings.Contains(body, "s3cr3t") {
		t.Error("a stored credential header's value is shown")
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	doc, _ := html.Parse(strings.NewReader(body))
	if got := text(byID(doc, "stored-body")); got != `<script>document.title="pwned"</script><b>made</b>` {
		t.Errorf("#stored-body text = %q", got)
	}
	if find(byID(doc, "stored-body"), func(n *html.Node) bool { return n.Data == "script" || n.Data == "b" }) != nil {
		t.Error("#stored-body holds elements")
	}
	headers := map[string]string{}
	for _, row := range find(byID(doc, "stored-headers"), func(n *html.Node) bool { return n.Data == "tr" }) {
		if cells := find(row, func(n *html.Node) bool { return n.Data == "td" || n.Data == "th" }); len(cells) == 2 {
			headers[text(cells[0])] = text(cells[1])
		}
	}
	if headers["Content-Type"] != "text/html" || headers["Authorization"] == "" || headers["X-Partner-Secret"] == "" {
		t.Errorf("stored headers %v, want Content-Type shown and the credentials listed, masked", headers)
	}
	scripts := find(doc, func(n *html.Node) bool { return n.Data == "script" })
	for _, s := range scripts {
		if src, _ := attr(s, "src"); src != "/admin/ui/static/console.js" {
			t.Errorf("a script other than the console's: src %q", src)
		}
	}
}

// A JSON body is shown indented, its secret-named members masked, its
// markup as text.
func TestStoredJSONBodyIsIndentedAndMasked(t *testing.T) {
	v := setup(t)
	if resp := v.call(t, "acme", "/v1/pages", "page-json", `{"want":"json"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("proxied call: %d", resp.StatusCode)
	}
	resp, body := v.adminDo(t, http.MethodGet, "/admin/ui/keys/acme/pages/page-json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("key page: %d", resp.StatusCode)
	}
	if strings.Contains(body, "s3cr3t") || strings.Contains(body, "<i>Ann") {
		t.Error("a secret member, or the body's markup, reached the page")
	}
	doc, _ := html.Parse(strings.NewReader(body))
	got := text(byID(doc, "stored-body"))
	for _, want := range []string{`"id": "p-1"`, `"client_secret": "•••• (hidden)"`, `"password": "•••• (hidden)"`, `"name": "<i>Ann</i>"`} {
		if !strings.Contains(got, want) {
			t.Errorf("#stored-body %q lacks %q", got, want)
		}
	}
}

// Finding 1: a job payload and a stored body nested 10,000 deep — a job
// recorded before jobs_api.max_depth, an upstream's answer — make pages of
// about their own size. Indenting every level made them pages of 100 MB
// and more, built again on every look.
func TestDeepDocumentsMakeSmallPages(t *testing.T) {
	v := setup(t)
	client, _, queue := testkit.Queue(t, "console-deep")
	spec, err := job.NewSpec("deep.take", []byte(`{"type":"object"}`), "deep:{order_id}", "")
	if err != nil {
		t.Fatal(err)
	}
	doc := deepJSON(deepDepth)
	rec, err := job.NewSubmitter(v.pool, client).Submit(t.Context(), job.Request{
		Tenant: "acme", Route: "invoices", Key: "deep-1", Spec: spec, Queue: queue, Body: []byte(doc), MaxDepth: deepDepth})
	if err != nil {
		t.Fatal(err)
	}
	if resp := v.call(t, "acme", "/v1/pages", "deep-page", `{"want":"deep"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("proxied call: %d", resp.StatusCode)
	}
	// The page around the document is a few KiB; the document, indented
	// to a fixed depth, a few KiB more than its own size.
	bound := len(doc) + 16<<10
	for _, c := range []struct{ path, pre string }{
		{"/admin/ui/jobs/" + rec.ID, "payload"},
		{"/admin/ui/keys/acme/pages/deep-page", "stored-body"},
	} {
		resp, body := v.adminDo(t, http.MethodGet, c.path)
		if resp.StatusCode != http.StatusOK || len(body) > bound {
			t.Fatalf("GET %s: %d, %d bytes, want 200 and at most %d", c.path, resp.StatusCode, len(body), bound)
		}
		doc, _ := html.Parse(strings.NewReader(body))
		if got := text(byID(doc, c.pre)); !strings.Contains(got, `"order_id": "o-deep"`) || !strings.Contains(got, `"x": [ [ [`) {
			t.Errorf("#%s = %.60q…, want the document indented", c.pre, got)
		}
	}
}

// Requeue, replay and delete do what `idemgate jobs requeue` and
// `idemgate dlq` do: the task is back in the queue, the failed job
// queued again, the deleted one gone.
func TestJobActions(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	stuck := v.invoice(t, "acme", "stuck-1", "o-1")
	// The broker lost its task, and the job has been waiting for an hour.
	if err := v.inspector.DeleteTask(v.queue, stuck); err != nil {
		t.Fatal(err)
	}
	if _, err := v.pool.Exec(ctx, `UPDATE jobs SET updated_at = now() - interval '1 hour' WHERE id = $1`, stuck); err != nil {
		t.Fatal(err)
	}
	links := find(byID(v.page(t, "/admin/ui/"), "stuck-jobs"), func(n *html.Node) bool { return n.Data == "a" })
	if len(links) != 1 || text(links[0]) != stuck {
		t.Fatalf("#stuck-jobs lists %d links, want the one stuck job", len(links))
	}
	if href, _ := attr(links[0], "href"); href != "/admin/ui/jobs/"+stuck {
		t.Errorf("stuck job link %q", href)
	}
	resp := v.post(t, "/admin/ui/jobs/"+stuck+"/requeue")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/admin/ui/jobs/"+stuck+"?done=requeued" {
		t.Fatalf("requeue: %d Location %q", resp.StatusCode, loc)
	}
	if info, err := v.inspector.GetTaskInfo(v.queue, stuck); err != nil || info.State.String() != "pending" {
		t.Fatalf("after requeue the task is %v, %v; want pending", info, err)
	}
	doc := v.page(t, "/admin/ui/jobs/"+stuck+"?done=requeued")
	if !strings.Contains(text(byID(doc, "flash")), "Requeued") {
		t.Errorf("#flash = %q", text(byID(doc, "flash")))
	}

	failed := v.invoice(t, "acme", "failed-1", "o-2")
	v.fail(t, failed)
	doc = v.page(t, "/admin/ui/jobs/"+failed)
	if byID(doc, "action-replay") == nil || byID(doc, "action-delete") == nil || byID(doc, "action-requeue") != nil {
		t.Error("a failed job's page: want replay and delete, no requeue")
	}
	// Requeue does not apply to a failed job: its confirmation refuses.
	if resp, _ := v.adminDo(t, http.MethodGet, "/admin/ui/jobs/"+failed+"/requeue"); resp.StatusCode != http.StatusConflict {
		t.Errorf("requeue confirmation of a failed job: %d, want 409", resp.StatusCode)
	}
	resp = v.post(t, "/admin/ui/jobs/"+failed+"/replay")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("replay: %d", resp.StatusCode)
	}
	if rec, err := v.records.ByID(ctx, failed); err != nil || rec.Status != job.StatusQueued {
		t.Errorf("after replay the job is %v, %v; want queued", rec.Status, err)
	}
	if info, err := v.inspector.GetTaskInfo(v.queue, failed); err != nil || info.State.String() != "pending" {
		t.Errorf("after replay the task is %v, %v; want pending", info, err)
	}

	cancelled := v.invoice(t, "acme", "cancel-1", "o-4")
	resp = v.post(t, "/admin/ui/jobs/"+cancelled+"/cancel")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/admin/ui/jobs/"+cancelled+"?done=cancelled" {
		t.Fatalf("cancel: %d Location %q", resp.StatusCode, loc)
	}
	if rec, err := v.records.ByID(ctx, cancelled); err != nil || rec.Status != job.StatusCancelled {
		t.Errorf("after cancel the job is %v, %v; want cancelled", rec.Status, err)
	}
	if info, err := v.inspector.GetTaskInfo(v.queue, cancelled); err == nil {
		t.Errorf("the cancelled job's task is still queued: %v", info.State)
	}
	if doc := v.page(t, "/admin/ui/jobs/"+cancelled); byID(doc, "action-cancel") != nil || byID(doc, "action-requeue") != nil {
		t.Error("a cancelled job's page offers cancel or requeue")
	}

	dead := v.invoice(t, "acme", "failed-2", "o-3")
	v.fail(t, dead)
	resp = v.post(t, "/admin/ui/jobs/"+dead+"/delete")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/admin/ui/jobs?done=job-deleted" {
		t.Fatalf("delete: %d Location %q", resp.StatusCode, loc)
	}
	if _, err := v.records.ByID(ctx, dead); err == nil {
		t.Error("the deleted job is still recorded")
	}
	if resp, _ := v.adminDo(t, http.MethodGet, "/admin/ui/jobs/"+dead); resp.StatusCode != http.StatusNotFound {
		t.Errorf("deleted job's page: %d, want 404", resp.StatusCode)
	}
}

// fail makes the job end as a worker that used up its attempts leaves it:
// failed, its task archived.
func (v *env) fail(t *testing.T, id string) {
	t.Helper()
	if err := v.records.SetStatus(t.Context(), id, job.StatusFailed, 3, "", "partner refused"); err != nil {
		t.Fatal(err)
	}
	if err := v.inspector.ArchiveTask(v.queue, id); err != nil {
		t.Fatal(err)
	}
}

// Resolve releases an unknown outcome; delete removes the record.
func TestKeyActions(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	scope := idempotency.Scope{Tenant: "acme", Route: "pages", Key: "held/1"}
	if _, err := v.store.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "f", Owner: "o1", Lease: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := v.store.MarkUnknown(ctx, scope, "o1"); err != nil {
		t.Fatal(err)
	}
	page := "/admin/ui/keys/acme/pages/held%2F1"
	doc := v.page(t, page)
	if got := text(byID(doc, "record-state")); got != "unknown" {
		t.Fatalf("#record-state = %q, want unknown", got)
	}
	if byID(doc, "action-resolve") == nil || byID(doc, "action-delete") == nil {
		t.Fatal("an unknown key's page: want resolve and delete")
	}
	resp := v.post(t, page+"/resolve")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != page+"?done=resolved" {
		t.Fatalf("resolve: %d Location %q", resp.StatusCode, loc)
	}
	if rec, err := v.store.Get(ctx, scope); err != nil || rec.State != idempotency.StateReleased {
		t.Fatalf("after resolve: %v, %v; want released", rec.State, err)
	}
	// Resolving again is refused, with what happened in #flash.error.
	resp, body := v.adminDo(t, http.MethodPost, page+"/resolve")
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `class="flash error"`) {
		t.Errorf("a second resolve: %d", resp.StatusCode)
	}
	resp = v.post(t, page+"/delete")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if _, err := v.store.Get(ctx, scope); err != idempotency.ErrNotFound {
		t.Errorf("after delete: %v, want not found", err)
	}
}

// A POST from another origin is refused before it acts; no credentials
// is a Basic challenge.
func TestCrossOriginAndUnauthenticated(t *testing.T) {
	v := setup(t)
	failed := v.invoice(t, "acme", "failed-x", "o-1")
	v.fail(t, failed)
	resp, _ := v.adminDo(t, http.MethodPost, "/admin/ui/jobs/"+failed+"/delete", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", resp.StatusCode)
	}
	if _, err := v.records.ByID(t.Context(), failed); err != nil {
		t.Errorf("the job is gone after a refused POST: %v", err)
	}
	resp, err := http.Get(v.admin.URL + "/admin/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("no credentials: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	// The stylesheet and script are served from the console itself.
	for _, p := range []string{"/admin/ui/static/console.css", "/admin/ui/static/console.js"} {
		if resp, body := v.adminDo(t, http.MethodGet, p); resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
		}
	}
}

// The job list pages by keyset: jobs inserted while an operator pages
// do not shift the next page.
func TestJobListPagesStablyWhileJobsArrive(t *testing.T) {
	v := setup(t)
	var first []string
	for i := range 55 {
		first = append(first, v.invoice(t, "acme", "k"+string(rune('a'+i/26))+string(rune('a'+i%26)), "o"))
	}
	doc := v.page(t, "/admin/ui/jobs?tenant=acme")
	page1 := rowIDs(doc)
	next := byID(doc, "next-page")
	if len(page1) != 50 || next == nil {
		t.Fatalf("first page: %d rows, next %v", len(page1), next != nil)
	}
	for i := range 3 {
		v.invoice(t, "acme", "late"+string(rune('a'+i)), "o")
	}
	href, _ := attr(next, "href")
	page2 := rowIDs(v.page(t, href))
	seen := map[string]bool{}
	for _, id := range append(page1, page2...) {
		if seen[id] {
			t.Errorf("%s on both pages", id)
		}
		seen[id] = true
	}
	for _, id := range first {
		if !seen[id] {
			t.Errorf("%s on neither page", id)
		}
	}
	if len(page2) != 5 {
		t.Errorf("second page: %d rows, want the 5 oldest", len(page2))
	}
}

func rowIDs(doc *html.Node) []string {
	var ids []string
	for _, r := range find(byID(doc, "jobs"), func(n *html.Node) bool { return hasClass(n, "job") }) {
		id, _ := attr(r, "data-id")
		ids = append(ids, id)
	}
	return ids
}

// The key page lists the requests the key received here, and the
// operators' actions on it.
func TestKeyPageRequestsAndActions(t *testing.T) {
	v := setup(t)
	for _, body := range []string{`{"n":1}`, `{"n":1}`, `{"n":2}`} {
		v.call(t, "acme", "/v1/pages", "told/1", body)
	}
	page := "/admin/ui/keys/acme/pages/told%2F1"
	doc := v.page(t, page)
	var kinds []string
	for _, row := range find(byID(doc, "requests"), func(n *html.Node) bool { return hasClass(n, "request") }) {
		k, _ := attr(row, "data-kind")
		kinds = append(kinds, k)
	}
	want := []string{"new", "replayed", "mismatch"}
	if !slices.Equal(kinds, want) || !strings.Contains(text(byID(doc, "requests")), "422: the key reused with another request") {
		t.Fatalf("#requests rows %v (%q): want new, replayed, 422", kinds, text(byID(doc, "requests")))
	}
	if byID(doc, "no-actions") == nil {
		t.Fatal("no action yet: want #no-actions")
	}
	if resp := v.post(t, page+"/delete"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	doc = v.page(t, page)
	entries := find(byID(doc, "audit"), func(n *html.Node) bool { return hasClass(n, "audit-entry") })
	if len(entries) != 1 {
		t.Fatalf("the key's audit trail after a delete: %q, want one entry", text(byID(doc, "audit")))
	}
	if a, _ := attr(entries[0], "data-action"); a != "delete-key" {
		t.Errorf("the entry's action %q: want delete-key", a)
	}
}

// The key page counts every request the key received, as the store keeps
// them beside the record: they reach it about a second after the
// requests, and go when the record does.
func TestKeyPageCountsRequests(t *testing.T) {
	v := setup(t)
	const replays = 4
	for range 1 + replays {
		v.call(t, "acme", "/v1/pages", "counted/1", `{"n":1}`)
	}
	v.call(t, "acme", "/v1/pages", "counted/1", `{"n":2}`)
	page := "/admin/ui/keys/acme/pages/counted%2F1"
	counts := func(doc *html.Node) map[string]string {
		got := map[string]string{}
		table := byID(doc, "request-counts")
		if table == nil {
			return got
		}
		for _, row := range find(table, func(n *html.Node) bool { return hasClass(n, "request-count") }) {
			k, _ := attr(row, "data-kind")
			cells := find(row, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "td" })
			got[k] = text(cells[len(cells)-1])
		}
		return got
	}
	want := map[string]string{"new": "1", "replayed": strconv.Itoa(replays), "conflict": "0", "mismatch": "1", "released": "0"}
	deadline := time.Now().Add(15 * time.Second)
	for {
		doc := v.page(t, page)
		got := counts(doc)
		if maps.Equal(got, want) {
			if byID(doc, "request-counts-seen") == nil {
				t.Error("counted requests: want when the first and last were seen")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("#request-counts %v: want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp := v.post(t, page+"/delete"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	doc := v.page(t, page)
	if got := counts(doc); len(got) != 0 || byID(doc, "no-request-counts") == nil {
		t.Errorf("after the record was deleted: counts %v, want none and #no-request-counts", got)
	}
}
