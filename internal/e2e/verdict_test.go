package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/examples/shipments"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/receiver"
)

// siblingDoc is the part of `explain --json` the verdict tests read
// besides explainDoc's.
type siblingDoc struct {
	Attempts []struct {
		Attempt      int    `json:"attempt"`
		FencingToken *int64 `json:"fencing_token"`
		Outcome      string `json:"outcome"`
		JobID        string `json:"job_id"`
		Try          int    `json:"try"`
		Counted      bool   `json:"counted"`
		Sibling      bool   `json:"sibling"`
	} `json:"attempts"`
	Effects []struct {
		Kind    string `json:"kind"`
		Ref     string `json:"ref"`
		JobID   string `json:"job_id"`
		Sibling bool   `json:"sibling"`
	} `json:"effects"`
	EffectsKnown bool   `json:"effects_known"`
	Verdict      string `json:"verdict"`
	Violation    bool   `json:"violation"`
	Uncertain    bool   `json:"uncertain"`
}

// TestExplainRefusedBySibling: two payment jobs for one payment_id with
// different amounts, run by a real worker against the partner simulator.
// The first charges; the second is refused without an attempt. Its story,
// from explain, the admin API and the console, says it was refused
// because the first did the business key, shows the first's attempt and
// charge as the first's (greyed, linked), and is no violation: the
// charge is the first job's, and reconcile says clean.
func TestExplainRefusedBySibling(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	srv := httptest.NewServer(partnersim.New(partnersim.Options{}))
	t.Cleanup(srv.Close)
	cfg := flowConfig(t, dbURL, redisURL, srv.URL, "sib"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	payment := "p-" + randomID()
	charge := func(key string, cents int) string {
		t.Helper()
		r := send(t, g.public, req{path: "/v1/payments/charges", key: key,
			body: fmt.Sprintf(`{"payment_id":%q,"amount_cents":%d,"currency":"EUR"}`, payment, cents)})
		if r.status != http.StatusAccepted {
			t.Fatalf("submit %s: %d %s", key, r.status, r.body)
		}
		return job.ID("acme", "charges", key)
	}
	first := charge("pay-a-"+payment, 1250)
	testkit.Eventually(t, "the first payment succeeded", 2*time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE id = $1 AND status = 'succeeded'`, first) == 1
	})
	second := charge("pay-b-"+payment, 999)
	testkit.Eventually(t, "the second payment failed", 2*time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE id = $1 AND status = 'failed'`, second) == 1
	})

	want := regexp.MustCompile(`^refused: business key payment:` + payment + ` already done by job ` + first + ` \(result ch_\S+\); this job ran nothing$`)
	doc, out := explainJSON(t, cfg, "--job", second)
	sib := decodeJSON[siblingDoc](t, out)
	if !want.MatchString(doc.Verdict) || doc.Violation {
		t.Errorf("verdict %q (violation %v), want %s\n%s", doc.Verdict, doc.Violation, want, out)
	}
	if len(sib.Attempts) != 1 || !sib.Attempts[0].Sibling || sib.Attempts[0].JobID != first || sib.Attempts[0].Try != 0 ||
		sib.Attempts[0].Outcome != "succeeded" {
		t.Errorf("attempts %+v, want the first job's succeeded attempt, marked a sibling's", sib.Attempts)
	}
	if len(sib.Effects) != 1 || sib.Effects[0].Kind != "payment" || !sib.Effects[0].Sibling || sib.Effects[0].JobID != first {
		t.Errorf("effects %+v, want the first job's charge, marked a sibling's", sib.Effects)
	}
	code, text, errOut := cli(t, nil, "explain", "--config", cfg, "--job", second)
	if code != 0 || !strings.Contains(text, "sibling "+first) || !strings.Contains(text, "written by sibling job "+first) ||
		!want.MatchString(lineOf(text, "verdict")) {
		t.Errorf("explain text: exit %d, want 0 with the sibling's rows and the refusal\n%s%s", code, text, errOut)
	}
	sameStory(t, g, "/admin/jobs/"+second+"/explain", doc)

	// The first job's own story is untouched by the second's.
	firstDoc, _ := explainJSON(t, cfg, "--job", first)
	if !strings.HasPrefix(firstDoc.Verdict, "succeeded once at attempt 1 with token ") || firstDoc.Violation {
		t.Errorf("the first job's verdict %q", firstDoc.Verdict)
	}

	page := consolePage(t, g, second)
	verdict := byIDNode(page, "verdict")
	if verdict == nil || !want.MatchString(nodeText(verdict)) || hasClassNode(verdict, "violation") {
		t.Errorf("console #verdict %q, want the refusal, not a violation", nodeText(verdict))
	}
	rows := findNodes(byIDNode(page, "attempts"), func(n *html.Node) bool { return hasClassNode(n, "attempt") })
	if len(rows) != 1 || !hasClassNode(rows[0], "sibling") || attrOf(rows[0], "data-job") != first ||
		len(findNodes(rows[0], func(n *html.Node) bool { return n.Data == "a" && attrOf(n, "href") == "/admin/ui/jobs/"+first })) != 1 {
		t.Errorf("console attempts: want one greyed row of job %s linking to it", first)
	}
	effects := findNodes(byIDNode(page, "effects"), func(n *html.Node) bool { return hasClassNode(n, "effect") })
	if len(effects) != 1 || !hasClassNode(effects[0], "sibling") || !strings.Contains(nodeText(effects[0]), "written by job "+first) {
		t.Errorf("console effects: want the charge, greyed, written by job %s", first)
	}

	code, out, errOut = cli(t, nil, "reconcile", "--config", cfg, "--partner", srv.URL)
	if code != 0 || !strings.Contains(out, "reconcile: clean") {
		t.Errorf("reconcile: exit %d, want clean\n%s%s", code, out, errOut)
	}
}

// hangingReceiver books each shipment with the real receiver (package
// receiver and examples/shipments) and then answers the first delivery
// never: the worker's call times out after the booking committed. Every
// later delivery is answered 503 with a long Retry-After, so the job
// waits between attempts.
type hangingReceiver struct {
	book http.Handler

	mu    sync.Mutex
	calls int
}

func (h *hangingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.calls++
	n := h.calls
	h.mu.Unlock()
	if n > 1 {
		w.Header().Set("Retry-After", "300")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	rec := httptest.NewRecorder()
	h.book.ServeHTTP(rec, r)
	<-r.Context().Done() // the answer is never sent
}

func (h *hangingReceiver) called() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// TestExplainDeliveryMayHaveApplied: a shipment delivered over HTTP whose
// first delivery the receiver booked but never answered (the call timed
// out), whose next one was refused 503, and which is then cancelled
// between attempts. The receiver holds the shipment with the job's id
// and the first attempt's token; explain, the admin API and the console
// say the receiver may have applied it at that attempt and token, drawn
// in amber, and never that nothing happened.
func TestExplainDeliveryMayHaveApplied(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	if err := shipments.EnsureSchema(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	v, err := receiver.NewVerifier(webhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	rcv := &hangingReceiver{book: shipments.New(v, pool)}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	cfg := deliverConfig(t, dbURL, redisURL, srv.URL+"/hooks/shipments", "may"+randomID())
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, bytes.Replace(b, []byte("timeout: 20s"), []byte("timeout: 1s"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	order := "o-" + randomID()
	id := submitShipment(t, g, "k-"+order, fmt.Sprintf(`{"order_id": %q, "quantity": 2}`, order))
	testkit.Eventually(t, "the second delivery refused", 2*time.Minute, func() bool {
		return rcv.called() >= 2 && count(t, pool, `SELECT count(*) FROM job_attempts WHERE job_id = $1 AND outcome IS NOT NULL`, id) >= 2 &&
			count(t, pool, `SELECT count(*) FROM jobs WHERE id = $1 AND status = 'retrying'`, id) == 1
	})
	if r := adminDo(t, g, http.MethodPost, "/admin/jobs/"+id+"/cancel", adminToken); r.status != http.StatusOK && r.status != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, "the job cancelled", time.Minute, func() bool {
		return count(t, pool, `SELECT count(*) FROM jobs WHERE id = $1 AND status = 'cancelled'`, id) == 1
	})
	var bookedBy string
	var bookedToken int64
	if err := pool.QueryRow(t.Context(), `SELECT job_id, fencing_token FROM shipments WHERE tenant = 'acme' AND order_id = $1`, order).
		Scan(&bookedBy, &bookedToken); err != nil {
		t.Fatalf("the receiver's shipment: %v", err)
	}
	if bookedBy != id {
		t.Fatalf("the shipment was booked by %s, want %s", bookedBy, id)
	}

	wantPart := fmt.Sprintf("the receiver may have applied it at attempt 1 (token %d)", bookedToken)
	doc, out := explainJSON(t, cfg, "--job", id)
	st := decodeJSON[siblingDoc](t, out)
	if !strings.HasPrefix(doc.Verdict, "cancelled ") || !strings.Contains(doc.Verdict, wantPart) || doc.Violation || !st.Uncertain {
		t.Errorf("verdict %q (violation %v, uncertain %v), want cancelled, uncertain: %s\n%s", doc.Verdict, doc.Violation, st.Uncertain, wantPart, out)
	}
	for _, calm := range []string{"nothing ran", "no attempt ran", "without its effect"} {
		if strings.Contains(doc.Verdict, calm) {
			t.Errorf("verdict %q says %q, but the receiver booked it", doc.Verdict, calm)
		}
	}
	if st.EffectsKnown || len(st.Effects) != 0 {
		t.Errorf("effects %+v known %v, want none known", st.Effects, st.EffectsKnown)
	}
	if len(st.Attempts) < 2 || st.Attempts[0].Try != 1 || st.Attempts[1].Try != 2 || st.Attempts[0].Counted {
		t.Errorf("attempts %+v, want tries numbered 1, 2, …, the given-back one not counted", st.Attempts)
	}
	code, text, errOut := cli(t, nil, "explain", "--config", cfg, "--job", id)
	if code != 0 || !strings.Contains(lineOf(text, "verdict"), wantPart) || !strings.Contains(text, "none known") ||
		!strings.Contains(text, "try 1") || !strings.Contains(text, "not counted: unavailable") {
		t.Errorf("explain text: exit %d\n%s%s", code, text, errOut)
	}
	sameStory(t, g, "/admin/jobs/"+id+"/explain", doc)

	page := consolePage(t, g, id)
	verdict := byIDNode(page, "verdict")
	if verdict == nil || !hasClassNode(verdict, "uncertain") || hasClassNode(verdict, "violation") || !strings.Contains(nodeText(verdict), wantPart) {
		t.Errorf("console #verdict %q, want amber (uncertain) with %q", nodeText(verdict), wantPart)
	}
	effects := nodeText(byIDNode(page, "effects"))
	if strings.Contains(effects, "No effect carries") || !strings.Contains(effects, "Unknown") {
		t.Errorf("console #effects %q, want unknown, not no effect", effects)
	}
	if tries := nodeText(byIDNode(page, "attempts")); !strings.Contains(tries, "Try 1, not counted: unavailable") {
		t.Errorf("console #attempts %q, want each try numbered", tries)
	}
}

// consolePage fetches the console's page of job id and parses it.
func consolePage(t *testing.T, g *gatewayProc, id string) *html.Node {
	t.Helper()
	r := adminDo(t, g, http.MethodGet, "/admin/ui/jobs/"+id, adminToken)
	if r.status != http.StatusOK {
		t.Fatalf("console page of %s: %d %s", id, r.status, r.body)
	}
	doc, err := html.Parse(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// lineOf is the first line of text that starts with label.
func lineOf(text, label string) string {
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, label); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

func findNodes(n *html.Node, match func(*html.Node) bool) []*html.Node {
	if n == nil {
		return nil
	}
	var out []*html.Node
	if match(n) {
		out = append(out, n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		out = append(out, findNodes(c, match)...)
	}
	return out
}

func byIDNode(n *html.Node, id string) *html.Node {
	if got := findNodes(n, func(n *html.Node) bool { return attrOf(n, "id") == id }); len(got) > 0 {
		return got[0]
	}
	return nil
}

func attrOf(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func hasClassNode(n *html.Node, class string) bool {
	return n != nil && strings.Contains(" "+attrOf(n, "class")+" ", " "+class+" ")
}

// nodeText is n's text with runs of space made one.
func nodeText(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for _, t := range findNodes(n, func(n *html.Node) bool { return n.Type == html.TextNode }) {
		b.WriteString(t.Data)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func decodeJSON[D any](t *testing.T, s string) D {
	t.Helper()
	var d D
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return d
}
