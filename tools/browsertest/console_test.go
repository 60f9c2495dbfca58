package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestConsoleInBrowser answers, in a browser alone, the questions an
// operator brings to the console: did this payment happen once, at which
// attempt, with which token; who held this key; can a dead or stuck job be
// run again from here, once. It also checks that the pages run nothing a
// stored body holds, refuse an action posted from another origin, and ask
// nothing of another origin.
//
// The payment that loses its worker waits for the relay to hand its job
// to another worker (about lock_ttl after the kill, once the dead worker's
// lock has expired), so its page stays open in a tab of its own while the
// other scenarios run in another.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium, gateways and workers")
	}
	chromium(t) // skip before starting anything when it is missing
	s := newStack(t)
	g := s.start("gateway", "serve")
	s.console = g
	run := randomID()

	// A job whose task the broker lost before any worker ran it: stuck
	// in queued until someone requeues it (the relay is told to wait an
	// hour).
	stuckPay := "stuck-" + run
	stuckID := s.submitPayment(g, stuckPay)
	s.dropTask(stuckID)

	w1 := s.start("worker-1", "worker")
	deadPay := deadPayment + run
	deadID := s.submitPayment(g, deadPay)

	// The live payment: 503, 500, then its third attempt hangs at the
	// partner and its worker is killed.
	livePay := livePayment + run
	liveID := s.submitPayment(g, livePay)
	select {
	case <-s.partner.hung:
	case <-time.After(90 * time.Second):
		t.Fatal("the live payment's third charge never reached the partner")
	}
	w1.kill()
	killed := time.Now()
	s.start("worker-2", "worker")

	b := newBrowser(t, g.admin())
	live := b.newTab(true)
	live.open(t, "/admin/ui/jobs/"+liveID)
	live.waitFor(t, "the live payment's page says processing", 20*time.Second, statusIs("processing"))
	// The third attempt is on the timeline, still running: its worker
	// died without ending it.
	if got := outcomesOf(live.items(t, "ol#attempts li.attempt")); got != "unavailable,unavailable," {
		t.Errorf("attempts while the worker is dead: %q, want two unavailable and one running", got)
	}
	opened := live.navigations()
	if _, err := eval[bool](live, "window.__openedOnce = true"); err != nil {
		t.Fatal(err)
	}

	ops := b.newTab(true)
	t.Run("key taken over", func(t *testing.T) { keyTakenOver(t, s, ops, run) })
	t.Run("dead letter replayed", func(t *testing.T) { deadLetterReplayed(t, s, ops, deadID, deadPay) })
	t.Run("stuck job requeued", func(t *testing.T) { stuckJobRequeued(t, s, ops, stuckID, stuckPay) })
	xssKey := "xss-" + run
	t.Run("stored body shown as text", func(t *testing.T) { storedBodyAsText(t, g, ops, xssKey) })
	t.Run("cross-origin post refused", func(t *testing.T) { crossOriginRefused(t, b, g, ops, xssKey) })

	t.Run("live payment", func(t *testing.T) {
		// The relay hands the job over about lock_ttl after the kill;
		// asynq's own recovery (about a minute) would also do, within
		// the bound.
		live.waitFor(t, "the live payment's page says succeeded", max(150*time.Second-time.Since(killed), 30*time.Second), statusIs("succeeded"))
		marked, err := eval[bool](live, "window.__openedOnce === true")
		if err != nil || !marked || live.navigations() != opened {
			t.Errorf("the page was reloaded to show the new status (marker kept %v, %v; navigations %d then %d)", marked, err, opened, live.navigations())
		}
		attempts := live.items(t, "ol#attempts li.attempt")
		outcomes := risingTokens(t, attempts)
		t.Logf("attempts: %v", attempts)
		if got := strings.Join(outcomes, ","); got != "unavailable,unavailable,crashed,succeeded" {
			t.Errorf("attempts on the timeline: %s, want unavailable,unavailable,crashed,succeeded", got)
		}
		if len(attempts) == 0 {
			t.FailNow()
		}
		last := attempts[len(attempts)-1]["token"]
		if v := live.text(t, "#verdict"); !strings.Contains(v, "succeeded once") || !strings.Contains(v, "token "+last) {
			t.Errorf("#verdict %q, want it to say succeeded once with token %s", v, last)
		}
		if e := live.text(t, "#effects"); !strings.Contains(e, "ch_") {
			t.Errorf("#effects %q names no charge", e)
		}
		if n := s.partner.charges(livePay); n != 1 {
			t.Errorf("the partner applied the live payment %d times, want 1", n)
		}
		live.screenshot(t, "console-job")

		// The theme follows the system's setting.
		light := live.prefersColorScheme(t, "light")
		dark := live.prefersColorScheme(t, "dark")
		if light < 200 || dark > 60 {
			t.Errorf("page background brightness %.0f in the light theme and %.0f in the dark one, want light and dark", light, dark)
		}
		live.screenshot(t, "console-job-dark")
		live.prefersColorScheme(t, "")
	})

	t.Run("overview and lists", func(t *testing.T) { overview(t, ops) })
	t.Run("key lookup", func(t *testing.T) { keyLookup(t, ops, "takeover-"+run) })
	t.Run("schedules", func(t *testing.T) { schedulesWalk(t, ops) })
	t.Run("fairness pool", func(t *testing.T) { fairnessWalk(t, s, g, ops, run) })
	t.Run("batch", func(t *testing.T) { batchWalk(t, s, g, ops, run) })

	t.Run("no request to another origin", func(t *testing.T) {
		foreign, total := b.foreignRequests()
		if total == 0 {
			t.Fatal("no request was recorded")
		}
		t.Logf("%d requests, all to %s", total, b.origin)
		if len(foreign) > 0 {
			t.Errorf("the console asked another origin than %s for %d of %d requests: %q", b.origin, len(foreign), total, foreign)
		}
	})
}

// statusIs is the predicate: #job-status says status.
func statusIs(status string) string {
	return fmt.Sprintf(`document.querySelector("#job-status") && document.querySelector("#job-status").textContent.trim() === %s`, jsString(status))
}

// outcomesOf is the attempts' outcomes, comma-separated.
func outcomesOf(attempts []map[string]string) string {
	var out []string
	for _, a := range attempts {
		out = append(out, a["outcome"])
	}
	return strings.Join(out, ",")
}

// risingTokens checks the attempts' tokens rise along the timeline and
// returns their outcomes, leaving out the attempts that found the lock
// busy (they hold no token of their own).
func risingTokens(t *testing.T, attempts []map[string]string) []string {
	t.Helper()
	var outcomes []string
	last := int64(0)
	for _, a := range attempts {
		if a["outcome"] == "lock_busy" {
			continue
		}
		outcomes = append(outcomes, a["outcome"])
		tok, err := strconv.ParseInt(a["token"], 10, 64)
		if err != nil || tok <= last {
			t.Errorf("attempt %v: token %q does not rise above %d", a, a["token"], last)
			continue
		}
		last = tok
	}
	return outcomes
}

// act runs the action of the page through its confirmation step: the
// link #action-NAME, the page that says what it will do, #confirm; and
// returns the flash the page it lands on shows.
func act(t *testing.T, tb *tab, name string) string {
	t.Helper()
	tb.click(t, "a#action-"+name)
	tb.waitFor(t, "the "+name+" confirmation", 20*time.Second,
		fmt.Sprintf(`location.pathname.endsWith(%s) && document.querySelector("form#confirm-form button#confirm")`, jsString("/"+name)))
	if what := tb.text(t, "#confirm-text"); what == "" {
		t.Errorf("the %s confirmation does not say what it does", name)
	}
	if method, _ := eval[string](tb, `document.querySelector("form#confirm-form").method`); method != "post" {
		t.Errorf("the %s confirmation form's method is %q, want post", name, method)
	}
	tb.click(t, "button#confirm")
	tb.waitFor(t, "the page after "+name, 20*time.Second,
		fmt.Sprintf(`!location.pathname.endsWith(%s) && document.querySelector("#flash")`, jsString("/"+name)))
	flash := tb.text(t, "#flash")
	if isErr, _ := eval[bool](tb, `document.querySelector("#flash").classList.contains("error")`); isErr {
		t.Fatalf("%s failed: %s", name, flash)
	}
	return flash
}

// keyTakenOver: a gateway killed while the upstream holds its request;
// another takes the key over once the lease ends. The key page shows both
// claims on the timeline, the dead one's taken over, then the survivor's,
// with a higher token, completed.
func keyTakenOver(t *testing.T, s *stack, tb *tab, run string) {
	doomed := s.start("gateway-doomed", "serve")
	key := "takeover-" + run
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = post(ctx, doomed.public(), "/v1/slow", key, `{"amount_cents":100}`)
	}()
	waitUntil(t, "the doomed gateway forwarded the request", 30*time.Second, func() bool { return s.upstream.calls(key) == 1 })
	doomed.kill()
	<-done

	var a answer
	waitUntil(t, "the survivor takes the key over after the lease", 30*time.Second, func() bool {
		var err error
		a, err = post(t.Context(), s.console.public(), "/v1/slow", key, `{"amount_cents":100}`)
		return err == nil && a.status != http.StatusConflict
	})
	if a.status != http.StatusCreated {
		t.Fatalf("the retry after the crash: %d %s", a.status, a.body)
	}

	tb.open(t, "/admin/ui/keys/"+tenant+"/slow/"+key)
	tb.waitFor(t, "two claims on the key page", 20*time.Second, `document.querySelectorAll("ol#claims li.claim").length === 2`)
	claims := tb.items(t, "ol#claims li.claim")
	first, err1 := strconv.ParseInt(claims[0]["token"], 10, 64)
	second, err2 := strconv.ParseInt(claims[1]["token"], 10, 64)
	if err1 != nil || err2 != nil || second <= first || claims[0]["outcome"] != "taken_over" || claims[1]["outcome"] != "completed" {
		t.Errorf("claims %v, want the first taken_over, then a higher token completed", claims)
	}
	if st := tb.text(t, "#record-state"); !strings.Contains(st, "completed") {
		t.Errorf("#record-state %q, want completed", st)
	}
	if st := tb.text(t, "#stored-status"); !strings.Contains(st, "201") {
		t.Errorf("#stored-status %q, want 201", st)
	}
	tb.screenshot(t, "console-key")
}

// deadLetterReplayed: a payment the partner refused is dead-lettered;
// replayed from its page, it succeeds, and the partner charged it once.
func deadLetterReplayed(t *testing.T, s *stack, tb *tab, id, paymentID string) {
	tb.open(t, "/admin/ui/jobs/"+id)
	tb.waitFor(t, "the refused payment's page says failed", 60*time.Second, statusIs("failed"))
	tb.screenshot(t, "console-dead-letter")
	tb.open(t, "/admin/ui/failed")
	tb.waitFor(t, "the failed-jobs page lists the refused payment", 20*time.Second, `document.querySelector('#failed-jobs tr.job[data-id="`+id+`"]')`)
	// Grouped by task and error: the payment's group leads to its jobs.
	group := `#failed-groups tr.failed-group[data-task="payment.charge"]`
	if n, _ := eval[int](tb, `Number((document.querySelector('`+group+`') || {dataset: {}}).dataset.count)`); n < 1 {
		t.Errorf("the failed jobs grouped: no payment.charge group counting the refused payment")
	}
	tb.screenshot(t, "console-failed")
	tb.click(t, group+" a.group-link")
	tb.waitFor(t, "the group's jobs", 20*time.Second,
		`location.search.includes("task=payment.charge") && document.querySelector('#failed-jobs tr.job[data-id="`+id+`"]')`)
	tb.open(t, "/admin/ui/jobs/"+id)
	tb.waitFor(t, "the refused payment's page again", 20*time.Second, statusIs("failed"))
	flash := act(t, tb, "replay")
	t.Logf("replay: %s", flash)
	tb.waitFor(t, "the replayed payment's page says succeeded", 60*time.Second, statusIs("succeeded"))
	attempts := tb.items(t, "ol#attempts li.attempt")
	outcomes := risingTokens(t, attempts)
	t.Logf("attempts: %v", attempts)
	if len(outcomes) < 2 || outcomes[len(outcomes)-1] != "succeeded" || outcomes[0] == "succeeded" {
		t.Errorf("attempts %v, want the refused one, then the replay's success", attempts)
	}
	if n := s.partner.charges(paymentID); n != 1 {
		t.Errorf("the partner applied the replayed payment %d times, want 1", n)
	}
}

// stuckJobRequeued: a queued job with no task runs once after a requeue
// from its page.
func stuckJobRequeued(t *testing.T, s *stack, tb *tab, id, paymentID string) {
	tb.open(t, "/admin/ui/jobs/"+id)
	tb.waitFor(t, "the stuck job's page says queued", 20*time.Second, statusIs("queued"))
	if n := len(tb.items(t, "ol#attempts li.attempt")); n != 0 {
		t.Errorf("the stuck job shows %d attempts before any ran", n)
	}
	flash := act(t, tb, "requeue")
	t.Logf("requeue: %s", flash)
	tb.waitFor(t, "the requeued job's page says succeeded", 60*time.Second, statusIs("succeeded"))
	if outcomes := risingTokens(t, tb.items(t, "ol#attempts li.attempt")); strings.Join(outcomes, ",") != "succeeded" {
		t.Errorf("attempts %v, want one, succeeded", outcomes)
	}
	if e := tb.text(t, "#effects"); strings.Count(e, "ch_") != 1 {
		t.Errorf("#effects %q, want one charge", e)
	}
	if n := s.partner.charges(paymentID); n != 1 {
		t.Errorf("the partner applied the requeued payment %d times, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM payments WHERE payment_id = $1 AND status = 'succeeded'`, paymentID); n != 1 {
		t.Errorf("%d succeeded payments %s, want 1", n, paymentID)
	}
}

// storedBodyAsText: an upstream's HTML answer, stored with the key, is
// shown as its text on the key page; none of its markup becomes an
// element and its script does not run.
func storedBodyAsText(t *testing.T, g *member, tb *tab, key string) {
	a, err := post(t.Context(), g.public(), "/v1/pages", key, `{"page":1}`)
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("POST /v1/pages: %v %d %s", err, a.status, a.body)
	}
	tb.open(t, "/admin/ui/keys/"+tenant+"/pages/"+key)
	tb.waitFor(t, "the stored body on the key page", 20*time.Second,
		fmt.Sprintf(`document.querySelector("#stored-body") && document.querySelector("#stored-body").textContent.includes(%s)`, jsString("<script>window.__pwned = 1</script>")))
	if els, _ := eval[int](tb, `document.querySelectorAll("#stored-body script, #stored-body img, #stored-body b").length`); els != 0 {
		t.Errorf("the stored body became %d elements", els)
	}
	if pwned, _ := eval[bool](tb, `typeof window.__pwned !== "undefined"`); pwned {
		t.Error("the stored body's script ran")
	}
	tb.screenshot(t, "console-stored-body")
}

// crossOriginRefused: a page on another origin auto-submits a form that
// posts the delete of a key to the console, in a browser that holds the
// admin credentials. The console refuses it (403) and the key stays; the
// same action confirmed on the console's own page deletes it.
func crossOriginRefused(t *testing.T, b *browser, g *member, tb *tab, key string) {
	action := g.admin() + "/admin/ui/keys/" + tenant + "/pages/" + key + "/delete"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>win a prize</title>
<form id="f" method="post" action="%s"><input name="confirm" value="yes"></form>
<script>document.getElementById("f").submit()</script>`, action)
	}))
	defer evil.Close()
	other := b.newTab(false)
	other.openURL(t, evil.URL)
	var status int
	waitUntil(t, "the cross-origin post's answer", 20*time.Second, func() bool {
		var ok bool
		status, ok = other.status(action)
		return ok
	})
	if status != http.StatusForbidden {
		t.Errorf("a cross-origin POST to %s answered %d, want 403", action, status)
	}
	if st := adminStatus(t, g, "/admin/keys/"+tenant+"/pages/"+key); st != http.StatusOK {
		t.Fatalf("after the refused cross-origin delete, GET the key: %d, want 200 (it must still be there)", st)
	}

	tb.open(t, "/admin/ui/keys/"+tenant+"/pages/"+key)
	act(t, tb, "delete")
	if st := adminStatus(t, g, "/admin/keys/"+tenant+"/pages/"+key); st != http.StatusNotFound {
		t.Errorf("after the delete confirmed on the console, GET the key: %d, want 404", st)
	}
}

// overview: the overview counts the jobs the scenarios ran, links the
// queue UI, and the job list shows them.
func overview(t *testing.T, tb *tab) {
	tb.open(t, "/admin/ui/")
	tb.waitFor(t, "the overview", 20*time.Second, `document.querySelector("h1") && document.querySelector("h1").textContent.includes("Overview")`)
	tb.waitFor(t, "succeeded jobs counted", 20*time.Second,
		`Number((document.querySelector('#jobs-by-status tr[data-status="succeeded"] td.count') || {}).textContent) >= 3`)
	if href, _ := eval[string](tb, `(document.querySelector("a#queues-link") || {}).pathname || ""`); href != "/admin/queues" {
		t.Errorf("a#queues-link goes to %q, want /admin/queues", href)
	}
	if n, _ := eval[int](tb, `document.querySelectorAll('#requests tr[data-tenant="acme"]').length`); n == 0 {
		t.Error("#requests has no row of tenant acme")
	}
	tb.waitFor(t, "the hour's activity chart", 20*time.Second,
		`Number((document.querySelector("figure#chart-hour") || {dataset: {}}).dataset.started) >= 3 && document.querySelectorAll("figure#chart-hour polyline").length === 5`)
	tb.screenshot(t, "console-overview")

	tb.open(t, "/admin/ui/jobs?status=succeeded")
	tb.waitFor(t, "the succeeded jobs listed", 20*time.Second, `document.querySelectorAll('#jobs tr.job[data-status="succeeded"] a.job-link').length >= 3`)
	tb.screenshot(t, "console-jobs")
}

// keyLookup: the lookup form, filled in as an operator types, opens the
// key's page; the recent keys of the route list it with its state.
func keyLookup(t *testing.T, tb *tab, key string) {
	tb.open(t, "/admin/ui/keys")
	tb.typeInto(t, `form#key-lookup input[name="tenant"]`, tenant)
	tb.typeInto(t, `form#key-lookup input[name="route"]`, "slow")
	tb.typeInto(t, `form#key-lookup input[name="key"]`, key)
	tb.click(t, `form#key-lookup button[type="submit"]`)
	tb.waitFor(t, "the looked-up key's page", 20*time.Second,
		fmt.Sprintf(`location.pathname === %s && document.querySelectorAll("ol#claims li.claim").length === 2`, jsString("/admin/ui/keys/"+tenant+"/slow/"+key)))

	tb.open(t, "/admin/ui/keys?tenant="+tenant+"&route=slow&state=completed")
	tb.waitFor(t, "the key among the route's completed keys", 20*time.Second,
		fmt.Sprintf(`document.querySelector('#keys tr.key[data-key=%s][data-state="completed"]')`, jsString(key)))
	tb.screenshot(t, "console-keys")
}

// adminStatus is the status of an authorized GET on the admin API.
func adminStatus(t *testing.T, g *member, path string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, g.admin()+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitUntil checks cond every 200ms (a client retrying a 409 waits as
// long) until it holds, failing after d.
func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
