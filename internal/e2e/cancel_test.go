package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// holdingReceiver holds each delivery of an order whose id starts with
// "hold-" until the test says how to answer it; any other order is
// answered 200 at once. It records every order it was sent.
type holdingReceiver struct {
	mu      sync.Mutex
	seen    []string
	answers map[string]chan int // order id → the status to answer; 0 drops the connection
}

func (h *holdingReceiver) answer(orderID string) chan int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.answers[orderID] == nil {
		h.answers[orderID] = make(chan int, 1)
	}
	return h.answers[orderID]
}

func (h *holdingReceiver) sent(orderID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, o := range h.seen {
		if o == orderID {
			n++
		}
	}
	return n
}

func (h *holdingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var env struct {
		Data struct {
			OrderID string `json:"order_id"`
		} `json:"data"`
	}
	_ = json.NewDecoder(r.Body).Decode(&env)
	orderID := env.Data.OrderID
	h.mu.Lock()
	h.seen = append(h.seen, orderID)
	h.mu.Unlock()
	status := http.StatusOK
	if strings.HasPrefix(orderID, "hold-") {
		select {
		case status = <-h.answer(orderID):
		case <-r.Context().Done():
			return
		}
	}
	if status == 0 {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"result_ref": "r-%s"}`, orderID)
}

func cancelReq(t *testing.T, g *gatewayProc, id, apiKey string) resp {
	t.Helper()
	hr, _ := http.NewRequest(http.MethodPost, g.public+"/v1/jobs/"+id+"/cancel", nil)
	hr.Header.Set("Authorization", "Bearer "+apiKey)
	return roundTrip(t, client, hr)
}

type cancelDoc struct {
	jobDoc
	CancelRequestedAt *time.Time `json:"cancel_requested_at"`
	FinishedAt        *time.Time `json:"finished_at"`
}

// TestCancelEndToEnd cancels jobs through a real gateway, a real worker,
// Redis and PostgreSQL, by each way a user has (the tenant's endpoint,
// the admin endpoint, `idemgate jobs cancel`), in each status, against a
// receiver that holds the deliveries it is told to.
func TestCancelEndToEnd(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	rcv := &holdingReceiver{answers: map[string]chan int{}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	cfg := deliverConfig(t, dbURL, redisURL, srv.URL+"/hooks/shipments", "cnl"+randomID())
	g := startGateway(t, cfg)
	run := randomID()
	submit := func(orderID string) string {
		t.Helper()
		return submitShipment(t, g, "k-"+orderID, fmt.Sprintf(`{"order_id": %q, "quantity": 1}`, orderID))
	}
	status := func(id string) cancelDoc {
		t.Helper()
		r := getJob(t, g.public, id, "acme-key")
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, r.status, r.body)
		}
		return decodeDoc[cancelDoc](t, r)
	}
	awaitStatus := func(id, want string) cancelDoc {
		t.Helper()
		var d cancelDoc
		testkit.Eventually(t, "job "+id+" "+want, 60*time.Second, func() bool { d = status(id); return d.Status == want })
		return d
	}

	// Queued (no worker yet): cancelled at once; again, unchanged.
	queued := submit("q-" + run)
	r := cancelReq(t, g, queued, "acme-key")
	first := decodeDoc[cancelDoc](t, r)
	if r.status != http.StatusOK || first.Status != "cancelled" || first.CancelRequestedAt == nil || first.FinishedAt == nil ||
		r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("cancel of a queued job: %d %s, want 200 cancelled with cancel_requested_at and finished_at", r.status, r.body)
	}
	r = cancelReq(t, g, queued, "acme-key")
	if again := decodeDoc[cancelDoc](t, r); r.status != http.StatusOK || again.Status != "cancelled" || !again.CancelRequestedAt.Equal(*first.CancelRequestedAt) {
		t.Fatalf("second cancel: %d %s, want 200, unchanged", r.status, r.body)
	}
	if r := cancelReq(t, g, queued, "globex-key"); r.status != http.StatusNotFound || r.problemType(t) != "not-found" {
		t.Fatalf("another tenant's cancel: %d %s, want 404", r.status, r.body)
	}
	if r := cancelReq(t, g, "job_00000000000000000000000000000000", "acme-key"); r.status != http.StatusNotFound {
		t.Fatalf("cancel of an unknown job: %d %s, want 404", r.status, r.body)
	}
	if r := cancelReq(t, g, queued, "wrong-key"); r.status != http.StatusUnauthorized {
		t.Fatalf("cancel without credentials: %d, want 401", r.status)
	}

	startWorker(t, cfg)

	// Processing: 202 cancelling (admin), then 200 cancelling (tenant);
	// the receiver's success answer decides.
	won := submit("hold-won-" + run)
	testkit.Eventually(t, "the delivery of "+won, 60*time.Second, func() bool { return rcv.sent("hold-won-"+run) == 1 })
	r = adminDo(t, g, http.MethodPost, "/admin/jobs/"+won+"/cancel", adminToken)
	if d := decodeDoc[cancelDoc](t, r); r.status != http.StatusAccepted || d.Status != "cancelling" || d.CancelRequestedAt == nil {
		t.Fatalf("admin cancel in flight: %d %s, want 202 cancelling", r.status, r.body)
	}
	if r := adminDo(t, g, http.MethodPost, "/admin/jobs/"+won+"/cancel", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("admin cancel without the token: %d, want 401", r.status)
	}
	r = cancelReq(t, g, won, "acme-key")
	if d := decodeDoc[cancelDoc](t, r); r.status != http.StatusOK || d.Status != "cancelling" {
		t.Fatalf("cancel of a cancelling job: %d %s, want 200 cancelling", r.status, r.body)
	}
	rcv.answer("hold-won-" + run) <- http.StatusOK
	if d := awaitStatus(won, "succeeded"); d.ResultRef == nil || *d.ResultRef != "r-hold-won-"+run {
		t.Fatalf("job whose delivery answered 200 after the cancel: %+v", d)
	}
	if r := cancelReq(t, g, won, "acme-key"); r.status != http.StatusConflict || r.problemType(t) != "job-not-cancellable" {
		t.Fatalf("cancel of a succeeded job: %d %s, want 409 job-not-cancellable", r.status, r.body)
	}

	// The CLI, on a job in flight whose receiver then drops the
	// connection: cancelling, then cancelled with the answer unknown.
	lost := submit("hold-lost-" + run)
	testkit.Eventually(t, "the delivery of "+lost, 60*time.Second, func() bool { return rcv.sent("hold-lost-"+run) == 1 })
	code, out, errOut := cli(t, nil, "jobs", "cancel", lost, "--config", cfg)
	if code != 0 || !strings.Contains(out, lost+": cancelling") {
		t.Fatalf("jobs cancel of a job in flight: exit %d\n%s%s", code, out, errOut)
	}
	rcv.answer("hold-lost-" + run) <- 0
	if d := awaitStatus(lost, "cancelled"); d.Error == nil || *d.Error != "no answer: the receiver may have applied it" {
		t.Fatalf("job whose delivery got no answer after the cancel: error %v", d.Error)
	}
	// And on a failure answer: cancelled, no second attempt.
	failed := submit("hold-fail-" + run)
	testkit.Eventually(t, "the delivery of "+failed, 60*time.Second, func() bool { return rcv.sent("hold-fail-"+run) == 1 })
	if r := cancelReq(t, g, failed, "acme-key"); r.status != http.StatusAccepted {
		t.Fatalf("cancel in flight: %d %s", r.status, r.body)
	}
	rcv.answer("hold-fail-" + run) <- http.StatusInternalServerError
	awaitStatus(failed, "cancelled")

	// Good and bad ids together: each is said, and the command fails.
	code, out, errOut = cli(t, nil, "jobs", "cancel", queued, won, "job_nope", "--config", cfg)
	if code != 1 || !strings.Contains(out, queued+": cancelled") || !strings.Contains(errOut, won+": succeeded, not cancellable") ||
		!strings.Contains(errOut, "job_nope: no such job") {
		t.Fatalf("jobs cancel with good and bad ids: exit %d\n%s%s", code, out, errOut)
	}

	// A later job runs and is delivered, so the worker has passed the
	// cancelled one: the receiver never saw it, nor a second attempt of
	// the others.
	after := submit("after-" + run)
	awaitStatus(after, "succeeded")
	if n := rcv.sent("q-" + run); n != 0 {
		t.Fatalf("the receiver got the job cancelled while queued %d time(s)", n)
	}
	for _, o := range []string{"hold-won-", "hold-lost-", "hold-fail-"} {
		if n := rcv.sent(o + run); n != 1 {
			t.Errorf("%s: %d deliveries, want 1: no attempt after a cancel", o+run, n)
		}
	}
}
