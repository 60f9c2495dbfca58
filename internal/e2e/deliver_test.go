package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/receiver"
)

// webhookSecret signs the test deliveries ("whsec_" + base64 of 32 bytes).
const webhookSecret = "whsec_dGVzdC1kZWxpdmVyeS1zZWNyZXQtb2YtMzItYnl0ZXM="

// delivery is one request the scripted receiver got.
type delivery struct {
	at                   time.Time
	tenant, key, orderID string
	attempt              int
	token                int64
	headerToken          string
}

// scriptedReceiver answers each order by the prefix of its id, verifies
// every signature with the receiver package (the Standard Webhooks
// algorithm, written apart from the sender), and applies an effect once
// per (tenant, key), as a receiver must.
type scriptedReceiver struct {
	t        *testing.T
	verifier *receiver.Verifier
	killed   chan struct{} // closed when a "kill-" order's first attempt is in
	once     sync.Once

	mu         sync.Mutex
	deliveries []delivery
	effects    map[string]int // tenant/key → times applied
	badSigs    int
}

func newScriptedReceiver(t *testing.T) *scriptedReceiver {
	v, err := receiver.NewVerifier(webhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	return &scriptedReceiver{t: t, verifier: v, killed: make(chan struct{}), effects: map[string]int{}}
}

func (s *scriptedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, err := receiver.Read(r, s.verifier, 1<<20)
	if err != nil {
		s.mu.Lock()
		s.badSigs++
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var data struct {
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(d.Data, &data)
	s.mu.Lock()
	s.deliveries = append(s.deliveries, delivery{at: time.Now(), tenant: d.Tenant, key: r.Header.Get("Idempotency-Key"),
		orderID: data.OrderID, attempt: d.Attempt, token: d.FencingToken, headerToken: r.Header.Get("Idempotency-Fencing-Token")})
	first := true
	for _, prev := range s.deliveries[:len(s.deliveries)-1] {
		if prev.tenant == d.Tenant && prev.key == d.BusinessKey {
			first = false
		}
	}
	s.mu.Unlock()
	apply := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		id := d.Tenant + "/" + d.BusinessKey
		if s.effects[id] == 0 {
			s.effects[id] = 1
		} else if !strings.HasPrefix(data.OrderID, "drop-") {
			s.effects[id]++ // a receiver that dedupes never gets here; counted to catch a sender that resends a success
		}
	}
	prefix, _, _ := strings.Cut(data.OrderID, "-")
	switch {
	case prefix == "flaky" && first:
		http.Error(w, "warming up", http.StatusServiceUnavailable)
	case prefix == "wait" && first:
		w.Header().Set("Retry-After", "2")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case prefix == "bad":
		http.Error(w, "no such warehouse", http.StatusBadRequest)
	case prefix == "drop" && first:
		apply() // the effect happens, the answer is lost
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	case prefix == "kill" && first:
		s.once.Do(func() { close(s.killed) })
		<-r.Context().Done() // the worker dies mid-call
	default:
		if prefix == "drop" {
			// The retry of a dropped answer: the receiver dedupes by
			// (tenant, key) and answers the first result.
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"result_ref": "r-%s"}`, data.OrderID)
			return
		}
		apply()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"result_ref": "r-%s"}`, data.OrderID)
	}
}

func (s *scriptedReceiver) of(tenant, orderID string) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery
	for _, d := range s.deliveries {
		if d.tenant == tenant && d.orderID == orderID {
			out = append(out, d)
		}
	}
	return out
}

func (s *scriptedReceiver) effectsOf(tenant, orderID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[tenant+"/shipment:"+orderID]
}

// deliverConfig declares shipment.book delivered over HTTP to url.
func deliverConfig(t *testing.T, dbURL, redisURL, url, queue string) string {
	t.Helper()
	cfg := configHead("postgres", dbURL, redisURL) + fmt.Sprintf(`tenants:
  - {name: acme, api_key_sha256: [%q]}
  - {name: globex, api_key_sha256: [%q]}
jobs:
  - task: shipment.book
    queue: %[3]s
    schema:
      type: object
      additionalProperties: false
      required: [order_id, quantity]
      properties:
        order_id: {type: string, minLength: 1}
        quantity: {type: integer, minimum: 1}
    business_key: "shipment:{order_id}"
    resource: "order:{order_id}"
    max_attempts: 5
    deliver:
      http:
        url: %[4]q
        secret: %[5]q
        timeout: 20s
        headers: {X-Api-Key: static-key}
routes:
  - {name: shipments, methods: [POST], path: /v1/shipments, enqueue: {task: shipment.book}}
worker:
  admin_listen: "127.0.0.1:0"
  concurrency: 4
  queues: {%[3]s: 1}
  lock_ttl: 5s
  shutdown_timeout: 5s
`, sha("acme-key"), sha("globex-key"), queue, url, webhookSecret)
	return writeFile(t, "deliver.yaml", cfg)
}

// TestHTTPDeliveryEndToEnd runs a declared job delivered over HTTP through
// a real gateway, real workers (one of them killed mid-call), Redis and
// PostgreSQL, against a receiver scripted per order.
func TestHTTPDeliveryEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for asynq to redeliver a killed worker's task")
	}
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	rcv := newScriptedReceiver(t)
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	cfg := deliverConfig(t, dbURL, redisURL, srv.URL+"/hooks/shipments", "dlv"+randomID())
	g := startGateway(t, cfg)
	run := randomID()
	submit := func(tenant, orderID string) string {
		t.Helper()
		body := fmt.Sprintf(`{"order_id": %q, "quantity": 2}`, orderID)
		r := send(t, g.public, req{path: "/v1/shipments", key: "k-" + orderID, apiKey: tenant + "-key", body: body})
		if r.status != http.StatusAccepted {
			t.Fatalf("submit %s for %s: %d %s", orderID, tenant, r.status, r.body)
		}
		return decodeJob(t, r).ID
	}

	// A worker process dies with SIGKILL while it waits for the receiver.
	doomed := startWorkerProcess(t, cfg)
	killID := submit("acme", "kill-"+run)
	select {
	case <-rcv.killed:
	case <-time.After(2 * time.Minute):
		t.Fatal("the doomed worker never called the receiver")
	}
	if err := doomed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = doomed.Wait()
	startWorker(t, cfg)

	ids := map[string]string{}
	for _, o := range []string{"ok", "flaky", "wait", "bad", "drop"} {
		ids[o] = submit("acme", o+"-"+run)
	}
	globexSame := submit("globex", "ok-"+run)

	final := func(id, tenant string) jobDoc {
		var j jobDoc
		testkit.Eventually(t, "job "+id+" finished", 4*time.Minute, func() bool {
			j = decodeJob(t, getJob(t, g.public, id, tenant+"-key"))
			return j.Status == "succeeded" || j.Status == "failed"
		})
		return j
	}
	succeeded := func(name, id, tenant, orderID string) {
		t.Helper()
		j := final(id, tenant)
		if j.Status != "succeeded" || j.ResultRef == nil || *j.ResultRef != "r-"+orderID {
			t.Errorf("%s: job %+v, want succeeded with result_ref r-%s", name, j, orderID)
		}
		if n := rcv.effectsOf(tenant, orderID); n != 1 {
			t.Errorf("%s: the receiver applied it %d times, want once", name, n)
		}
	}

	succeeded("200 at once", ids["ok"], "acme", "ok-"+run)
	// The same business key with another payload, under another
	// Idempotency-Key, once the first has succeeded: not a replay of its
	// result.
	other := send(t, g.public, req{path: "/v1/shipments", key: "k-other-" + run, apiKey: "acme-key",
		body: fmt.Sprintf(`{"order_id": %q, "quantity": 7}`, "ok-"+run)})
	if other.status != http.StatusAccepted {
		t.Fatalf("submit the conflicting payload: %d %s", other.status, other.body)
	}
	conflictID := decodeJob(t, other).ID
	succeeded("the same fields from another tenant", globexSame, "globex", "ok-"+run)
	succeeded("503 then 200", ids["flaky"], "acme", "flaky-"+run)
	succeeded("429 with Retry-After then 200", ids["wait"], "acme", "wait-"+run)
	succeeded("an answer dropped after the effect", ids["drop"], "acme", "drop-"+run)
	succeeded("a worker killed mid-call", killID, "acme", "kill-"+run)

	bad := final(ids["bad"], "acme")
	if bad.Status != "failed" || bad.Attempts != 1 || bad.Error == nil || *bad.Error != "receiver refused the job (answered 400)" {
		t.Errorf("400: job %+v, want failed after one attempt with the status, without the body", bad)
	}
	if n := len(rcv.of("acme", "bad-"+run)); n != 1 {
		t.Errorf("400: the receiver was called %d times, want exactly once", n)
	}
	conflict := final(conflictID, "acme")
	if conflict.Status != "failed" || conflict.Error == nil || !strings.Contains(*conflict.Error, "conflict") || conflict.ResultRef != nil {
		t.Errorf("another payload for a succeeded business key: job %+v, want failed as a conflict, without the first job's result", conflict)
	}
	if n := rcv.effectsOf("acme", "ok-"+run); n != 1 {
		t.Errorf("the conflicting payload reached the receiver: %d effects", n)
	}
	if code, out, _ := cli(t, nil, "dlq", "list", "--config", cfg); code != 0 || !strings.Contains(out, ids["bad"]) || !strings.Contains(out, conflictID) {
		t.Errorf("dlq list: exit %d, want it to list %s and %s:\n%s", code, ids["bad"], conflictID, out)
	}

	// Every attempt of one job: the same Idempotency-Key, a strictly
	// rising fencing token, the attempt number counting up.
	for _, o := range []string{"flaky", "wait", "drop", "kill"} {
		ds := rcv.of("acme", o+"-"+run)
		if len(ds) < 2 {
			t.Errorf("%s: %d deliveries, want a retry", o, len(ds))
			continue
		}
		for i, d := range ds {
			if d.key != "shipment:"+o+"-"+run || d.headerToken != strconv.FormatInt(d.token, 10) {
				t.Errorf("%s attempt %d: Idempotency-Key %q, token header %q body %d", o, i+1, d.key, d.headerToken, d.token)
			}
			if i > 0 && d.token <= ds[i-1].token {
				t.Errorf("%s: fencing tokens %d then %d, want strictly rising", o, ds[i-1].token, d.token)
			}
		}
	}
	if ds := rcv.of("acme", "wait-"+run); len(ds) >= 2 {
		if gap := ds[1].at.Sub(ds[0].at); gap < 2*time.Second {
			t.Errorf("Retry-After: 2 was answered; the next attempt came %s later", gap)
		}
	}
	if rcv.badSigs != 0 {
		t.Errorf("%d deliveries failed signature verification", rcv.badSigs)
	}
	// Both tenants' jobs ran, each on its own resource.
	// A resource's first token is the database clock in microseconds.
	floor := time.Now().Add(-time.Hour).UnixMicro()
	if a, b := rcv.of("acme", "ok-"+run), rcv.of("globex", "ok-"+run); len(a) != 1 || len(b) != 1 || a[0].token < floor || b[0].token < floor {
		t.Errorf("two tenants, same order: %d and %d deliveries (tokens %v %v), want one each, each with a token of its own resource", len(a), len(b), a, b)
	}
}

// TestHTTPDeliveryErrorTenantsRead: a receiver that answers 500 with an
// internal error in its body, behind a delivery URL with a user, a
// password and a token in its query. The tenant's job document says only
// what the receiver answered; explain, for operators, keeps the detail
// with the URL's credentials masked.
func TestHTTPDeliveryErrorTenantsRead(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	const body = "pq: password authentication failed for user billing at db.internal:5432"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, body, http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	url := "http://ops:pw-hunter2@" + hostPort + "/hooks/shipments?token=tok-s3cret"
	cfg := deliverConfig(t, dbURL, redisURL, url, "err"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	id := submitShipment(t, g, "err-1", `{"order_id": "o-err", "quantity": 1}`)
	var raw string
	testkit.Eventually(t, "the job's first attempt failed", time.Minute, func() bool {
		res := getJob(t, g.public, id, "acme-key")
		raw = string(res.body)
		return decodeJob(t, res).Error != nil
	})
	if j := decodeJob(t, getJob(t, g.public, id, "acme-key")); *j.Error != "receiver answered 500" {
		t.Errorf("the job document's error is %q, want %q", *j.Error, "receiver answered 500")
	}
	for _, never := range []string{"tok-s3cret", "pw-hunter2", "ops:", hostPort, "/hooks", "db.internal", "password authentication"} {
		if strings.Contains(raw, never) {
			t.Errorf("the job document shows %q:\n%s", never, raw)
		}
	}

	doc, out := explainJSON(t, cfg, "--job", id)
	if len(doc.Attempts) == 0 {
		t.Fatalf("explain shows no attempt:\n%s", out)
	}
	detail := doc.Attempts[0].Error
	if want := "http://ops:xxxxx@" + hostPort + "/hooks/shipments?REDACTED answered 500: " + body; !strings.Contains(detail, want) {
		t.Errorf("the ledger's error %q, want it to contain %q", detail, want)
	}
	if strings.Contains(out, "tok-s3cret") || strings.Contains(out, "pw-hunter2") {
		t.Errorf("explain shows a credential of the delivery URL:\n%s", out)
	}
}

// submitShipment submits body for acme under the Idempotency-Key key and
// returns the job's id.
func submitShipment(t *testing.T, g *gatewayProc, key, body string) string {
	t.Helper()
	r := send(t, g.public, req{path: "/v1/shipments", key: key, apiKey: "acme-key", body: body})
	if r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	return decodeJob(t, r).ID
}

// TestHTTPDeliveryHeaders checks one delivery byte for byte: the envelope
// and the headers a receiver relies on.
func TestHTTPDeliveryHeaders(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- r.Clone(r.Context()):
			bodies <- b
		default:
		}
		w.Header().Set("Location", "/shipments/42")
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	cfg := deliverConfig(t, dbURL, redisURL, srv.URL+"/hooks/shipments", "hdr"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	id := submitShipment(t, g, "hdr-1", `{"order_id": "o-9", "quantity": 3}`)
	var h *http.Request
	select {
	case h = <-got:
	case <-time.After(time.Minute):
		t.Fatal("no delivery")
	}
	body := <-bodies
	v, _ := receiver.NewVerifier(webhookSecret)
	if err := v.Verify(h.Header, body); err != nil {
		t.Errorf("signature: %v", err)
	}
	want := map[string]string{
		"Content-Type": "application/json", "Webhook-Id": id, "Idempotency-Key": "shipment:o-9",
		"Idemgate-Tenant": "acme", "Idemgate-Task": "shipment.book",
		"Idemgate-Attempt": "1", "X-Api-Key": "static-key",
	}
	for k, v := range want {
		if got := h.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"type": `"shipment.book"`, "job_id": strconv.Quote(id), "tenant": `"acme"`,
		"business_key": `"shipment:o-9"`, "attempt": `1`} {
		if string(env[k]) != v {
			t.Errorf("body %s = %s, want %s", k, env[k], v)
		}
	}
	// The token is the one the attempt drew (a clock floor, not a count
	// from 1): the same in the header and the body, a string of digits.
	token := h.Header.Get("Idempotency-Fencing-Token")
	if n, err := strconv.ParseInt(token, 10, 64); err != nil || n < 1 || string(env["fencing_token"]) != strconv.Quote(token) {
		t.Errorf("fencing token: header %q, body %s, want the same positive integer, the body's as a string", token, env["fencing_token"])
	}
	if !bytes.Contains(env["data"], []byte(`"quantity": 3`)) && !bytes.Contains(env["data"], []byte(`"quantity":3`)) {
		t.Errorf("body data = %s, want the payload", env["data"])
	}
	var j jobDoc
	testkit.Eventually(t, "the job succeeded", time.Minute, func() bool {
		j = decodeJob(t, getJob(t, g.public, id, "acme-key"))
		return j.Status == "succeeded"
	})
	if j.ResultRef == nil || *j.ResultRef != "/shipments/42" {
		t.Errorf("result_ref %v, want the Location header", j.ResultRef)
	}
	_ = job.HeaderID
}
