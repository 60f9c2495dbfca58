package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// TestSchedulePages: the schedules list shows each schedule with its
// timing, source and last fire linking to its job, page by page; a
// schedule's page shows its next five slots and its slots, fired ones
// linking to their jobs and skipped ones saying why; a fired job links
// back to its schedule; a schedule that does not exist is a 404 page.
func TestSchedulePages(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	clock := testkit.NewClock(start)
	v := setupWith(t, func(o *console.Options) { o.Now = clock.Now })
	ctx := t.Context()
	client, _, queue := testkit.Queue(t, "console-sched")
	schema, err := os.ReadFile("testdata/invoice.create.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := job.NewSpec("invoice.create", schema, "invoice:{order_id}", "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Queue = queue
	store := job.NewSchedules(v.pool)
	every := func(d time.Duration) job.Timing {
		tm, err := job.ParseTiming("", d, "")
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	body := json.RawMessage(`{"order_id":"o-sched","amount_cents":100,"currency":"EUR"}`)
	if _, _, err := store.Put(ctx, job.Recurring{Tenant: "acme", ID: "nightly", Task: spec.Task, Timing: every(time.Minute), Body: body, Source: job.SourceAPI}, clock.Now(), 0); err != nil {
		t.Fatal(err)
	}
	cronTiming, err := job.ParseTiming("0 3 * * *", 0, "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Declare(ctx, []job.Recurring{{Tenant: "globex", ID: "report", Task: spec.Task, Timing: cronTiming, Body: body}}, clock.Now()); err != nil {
		t.Fatal(err)
	}
	sched, err := job.NewScheduler(job.NewSubmitter(v.pool, client), v.pool, []*job.Spec{spec},
		job.SchedulerOptions{Now: clock.Now, Grace: 15 * time.Second, Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(at time.Time) {
		t.Helper()
		clock.Add(at.Sub(clock.Now()))
		if _, err := sched.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slot := func(hm string) time.Time {
		at, err := time.Parse(time.RFC3339, "2026-03-01T"+hm+":00Z")
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	// 12:01 fires; 12:02 is skipped behind it (overlap skip); paused,
	// 12:03 is skipped; resumed at 12:10, 12:04 to 12:09 are missed and
	// 12:10 fires.
	pass(slot("12:01").Add(time.Second))
	pass(slot("12:02").Add(time.Second))
	first := job.FireID("acme", "nightly", slot("12:01"))
	if err := v.records.SetStatus(ctx, first, job.StatusSucceeded, 1, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetPaused(ctx, "acme", "nightly", true); err != nil {
		t.Fatal(err)
	}
	pass(slot("12:03").Add(time.Second))
	if _, err := store.SetPaused(ctx, "acme", "nightly", false); err != nil {
		t.Fatal(err)
	}
	pass(slot("12:10").Add(time.Second))
	last := job.FireID("acme", "nightly", slot("12:10"))

	doc := v.page(t, "/admin/ui/schedules")
	if href, _ := attr(byID(doc, "schedules-link"), "href"); href != "/admin/ui/schedules" {
		t.Errorf("the nav's schedules link: %q", href)
	}
	rows := scheduleRows(doc)
	nightly, report := rows["acme/nightly"], rows["globex/report"]
	if len(rows) != 2 || nightly == nil || report == nil {
		t.Fatalf("the list shows %v, want acme/nightly and globex/report", keysOf(rows))
	}
	for _, c := range []struct {
		row         *html.Node
		class, want string
	}{
		{nightly, "timing", "@every 1m0s UTC"}, {nightly, "source", "api"}, {nightly, "paused", "no"},
		{nightly, "next-fire", "2026-03-01 12:11:00.000Z"},
		{report, "timing", "0 3 * * * Europe/Paris"}, {report, "source", "config"}, {report, "last-fire", "never"},
	} {
		if got := text(cell(c.row, c.class)); got != c.want {
			t.Errorf("%s's %s: %q, want %q", attrOf(c.row, "data-id"), c.class, got, c.want)
		}
	}
	lastFire := find(nightly, func(n *html.Node) bool { return hasClass(n, "last-fire-job") })
	if len(lastFire) != 1 || attrOf(lastFire[0], "href") != "/admin/ui/jobs/"+last || text(lastFire[0]) != "queued" {
		t.Errorf("nightly's last fire: %q, want a link to %s, queued", text(cell(nightly, "last-fire")), last)
	}
	if href := attrOf(find(nightly, func(n *html.Node) bool { return hasClass(n, "schedule-link") })[0], "href"); href != "/admin/ui/schedules/acme/nightly" {
		t.Errorf("nightly's link: %q", href)
	}

	doc = v.page(t, "/admin/ui/schedules/acme/nightly")
	var upcoming []string
	for _, li := range find(byID(doc, "upcoming"), func(n *html.Node) bool { return n.Data == "li" }) {
		upcoming = append(upcoming, text(li))
	}
	want := []string{"2026-03-01 12:11:00.000Z", "2026-03-01 12:12:00.000Z", "2026-03-01 12:13:00.000Z", "2026-03-01 12:14:00.000Z", "2026-03-01 12:15:00.000Z"}
	if strings.Join(upcoming, ",") != strings.Join(want, ",") {
		t.Errorf("next fire times %q, want %q", upcoming, want)
	}
	var slots []string
	for _, row := range find(byID(doc, "slots"), func(n *html.Node) bool { return hasClass(n, "slot") }) {
		s := attrOf(row, "data-slot")[11:16] + " " + text(cell(row, "outcome"))
		if links := find(row, func(n *html.Node) bool { return hasClass(n, "slot-job") }); len(links) == 1 {
			s += " " + strings.TrimPrefix(attrOf(links[0], "href"), "/admin/ui/jobs/") + " " + text(links[0].Parent.LastChild)
		}
		slots = append(slots, s)
	}
	want = []string{"12:10 fired " + last + " queued"}
	for m := 9; m >= 4; m-- {
		want = append(want, fmt.Sprintf("12:%02d skipped: missed", m))
	}
	want = append(want, "12:03 skipped: paused", "12:02 skipped: overlap", "12:01 fired "+first+" succeeded")
	if strings.Join(slots, "\n") != strings.Join(want, "\n") {
		t.Errorf("the slots:\n%s\nwant:\n%s", strings.Join(slots, "\n"), strings.Join(want, "\n"))
	}

	link := byID(v.page(t, "/admin/ui/jobs/"+first), "schedule-link")
	if attrOf(link, "href") != "/admin/ui/schedules/acme/nightly" {
		t.Errorf("the fired job's schedule link: %q", attrOf(link, "href"))
	}
	if byID(v.page(t, "/admin/ui/jobs/"+v.invoice(t, "acme", "by-hand", "o-by-hand")), "schedule-link") != nil {
		t.Error("a job submitted by a request links to a schedule")
	}

	for _, path := range []string{"/admin/ui/schedules/acme/nope", "/admin/ui/schedules/globex/nightly"} {
		resp, body := v.adminDo(t, http.MethodGet, path)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "No schedule") || !strings.Contains(body, `id="flash"`) {
			t.Errorf("GET %s: %d, want the console's 404 page\n%s", path, resp.StatusCode, body)
		}
	}
	if resp, _ := v.adminDo(t, http.MethodGet, "/admin/ui/schedules?after=not-a-cursor"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad cursor: %d, want 400", resp.StatusCode)
	}
}

// TestSchedulesListPages: past a page of schedules the list pages on,
// each schedule listed once, and a tenant's filter keeps to it.
func TestSchedulesListPages(t *testing.T) {
	v := setup(t)
	store := job.NewSchedules(v.pool)
	tm, err := job.ParseTiming("", time.Hour, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 53 {
		tenant := []string{"acme", "globex"}[i%2]
		r := job.Recurring{Tenant: tenant, ID: fmt.Sprintf("s-%02d", i), Task: "invoice.create", Timing: tm, Body: json.RawMessage(`{}`), Source: job.SourceAPI}
		if _, _, err := store.Put(t.Context(), r, time.Now(), 0); err != nil {
			t.Fatal(err)
		}
		want[tenant+"/"+r.ID] = true
	}
	seen := map[string]int{}
	pages := 0
	for path := "/admin/ui/schedules"; path != ""; pages++ {
		doc := v.page(t, path)
		for k := range scheduleRows(doc) {
			seen[k]++
		}
		path = attrOf(byID(doc, "next-page"), "href")
		if pages > 3 {
			t.Fatal("the list does not end")
		}
	}
	if pages != 2 || len(seen) != len(want) {
		t.Errorf("listed %d schedules in %d pages, want %d in 2", len(seen), pages, len(want))
	}
	for k, n := range seen {
		if !want[k] || n != 1 {
			t.Errorf("%s listed %d times", k, n)
		}
	}
	rows := scheduleRows(v.page(t, "/admin/ui/schedules?tenant=globex"))
	if len(rows) != 26 {
		t.Errorf("globex's schedules: %d listed, want 26", len(rows))
	}
	for k := range rows {
		if !strings.HasPrefix(k, "globex/") {
			t.Errorf("globex's list shows %s", k)
		}
	}
}

// With PostgreSQL down the schedules list says so instead of failing,
// and a schedule's page is a 503 that says why.
func TestSchedulesWithoutPostgreSQL(t *testing.T) {
	srv, _ := downConsole(t)
	status, doc := get(t, srv.URL+console.DefaultPrefix+"/schedules")
	if status != http.StatusOK || !strings.Contains(text(byID(doc, "unreadable")), "PostgreSQL could not be read") {
		t.Errorf("schedules without PostgreSQL: %d %q, want 200 saying so", status, text(byID(doc, "unreadable")))
	}
	if byID(doc, "schedule-filter") == nil {
		t.Error("the schedules list without PostgreSQL lost its filter")
	}
	status, doc = get(t, srv.URL+console.DefaultPrefix+"/schedules/acme/nightly")
	if status != http.StatusServiceUnavailable || !strings.Contains(text(byID(doc, "flash")), "could not be read") {
		t.Errorf("schedule page without PostgreSQL: %d %q, want 503 saying so", status, text(byID(doc, "flash")))
	}
}

// scheduleRows are the list's rows by tenant/id.
func scheduleRows(doc *html.Node) map[string]*html.Node {
	out := map[string]*html.Node{}
	for _, row := range find(doc, func(n *html.Node) bool { return hasClass(n, "schedule") }) {
		out[attrOf(row, "data-tenant")+"/"+attrOf(row, "data-id")] = row
	}
	return out
}

func keysOf(m map[string]*html.Node) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// cell is the first element under row with class.
func cell(row *html.Node, class string) *html.Node {
	if row == nil {
		return nil
	}
	found := find(row, func(n *html.Node) bool { return hasClass(n, class) })
	if len(found) == 0 {
		return nil
	}
	return found[0]
}

// attrOf is n's attribute name; "" when n is nil or has none.
func attrOf(n *html.Node, name string) string {
	if n == nil {
		return ""
	}
	v, _ := attr(n, name)
	return v
}
