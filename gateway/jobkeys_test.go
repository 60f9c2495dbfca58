package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
)

// shipmentSpec is a job whose business key, resource and flow-limit key
// each come from a field of their own.
func shipmentSpec(t *testing.T) *job.Spec {
	t.Helper()
	spec, err := job.NewSpec("shipment.book", []byte(`{
		"type": "object",
		"required": ["order_id", "warehouse", "account"],
		"properties": {"order_id": {"type": "string"}, "warehouse": {"type": "string"}, "account": {"type": "string"}}
	}`), "ship:{order_id}", "warehouse:{warehouse}")
	if err != nil {
		t.Fatal(err)
	}
	key, err := job.ParseTemplate("acct:{account}")
	if err != nil {
		t.Fatal(err)
	}
	spec.Limits = []job.FlowLimitUse{{Limit: job.FlowLimit{Name: "ship-api", Concurrency: 1}, Key: key}}
	return spec
}

// TestKeysFromThePayloadAreChecked: a business key, resource or flow-limit
// key that a payload forms and that cannot be stored or sent is the
// client's mistake, refused with 422 invalid-payload naming the field,
// before anything is recorded or enqueued. A CR/LF in a business key used
// to be accepted and then retried for ever, since the delivery sends it in
// a header; a 3,000-byte business key, past PostgreSQL's btree row, was a
// 503 the client retried for ever; a 3,000-byte resource was accepted and
// its job stayed queued for ever.
func TestKeysFromThePayloadAreChecked(t *testing.T) {
	pool := testkit.Pool(t)
	queue, inspector, qname := testkit.Queue(t, "keys")
	opts := testOptions(job.NewSubmitter(pool, queue))
	opts.Routes = []RouteOptions{{
		Name: "shipments", Methods: []string{http.MethodPost}, Path: "/v1/shipments",
		Enqueue: &EnqueueOptions{Spec: shipmentSpec(t), Queue: qname},
	}}
	store := pgstore.New(pool)
	t.Cleanup(store.Close)
	opts.Store = store
	g := newTestGateway(t, opts)
	run := testkit.Prefix()
	auth := []string{"Authorization", "Bearer " + testAPIKey}

	body := func(order, warehouse, account string) string {
		b, err := json.Marshal(map[string]string{"order_id": order, "warehouse": warehouse, "account": account})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	long := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name, body string
		field      string // the field the 422 names; "" for a 202
	}{
		{"CR LF in the business key", body("o-1\r\nX-Injected: 1", "w-1", "a-1"), "order_id"},
		{"DEL in the business key", body("o-\x7f", "w-1", "a-1"), "order_id"},
		{"3000-byte business key", body(long, "w-1", "a-1"), "order_id"},
		{"3000-byte resource", body("o-2", long, "a-1"), "warehouse"},
		{"LF in the resource", body("o-3", "w\n1", "a-1"), "warehouse"},
		{"LF in a flow limit's key", body("o-4", "w-1", "a\n1"), "account"},
		{"business key at the bound", body(strings.Repeat("k", job.MaxKeyBytes-len("ship:")), "w-1", "a-1"), ""},
		{"long flow limit key", body("o-5", "w-1", strings.Repeat("a", 100_000)), ""},
		{"non-ASCII text", body("o-é-6", "w-ü", "a-ß"), ""},
	} {
		key := run + strings.ReplaceAll(tc.name, " ", "-")
		header := append([]string{"Idempotency-Key", key, "Content-Type", "application/json"}, auth...)
		resp, got := serve(t, g.Handler(), http.MethodPost, "/v1/shipments", tc.body, header...)
		id := job.ID("acme", "shipments", key)
		_, jerr := opts.Jobs.Get(t.Context(), "acme", id)
		_, terr := inspector.GetTaskInfo(qname, id)
		if tc.field == "" {
			if resp.StatusCode != http.StatusAccepted || jerr != nil || terr != nil {
				t.Errorf("%s: %d %s (job: %v, task: %v), want 202 and the job queued", tc.name, resp.StatusCode, shorten(got), jerr, terr)
			}
			continue
		}
		if resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want 422 invalid-payload", tc.name, resp.StatusCode, shorten(got))
			continue
		}
		if p := decodeBody(t, got); p.Type != "https://idemgate.dev/problems/invalid-payload" {
			t.Errorf("%s: %s, want invalid-payload", tc.name, shorten(got))
			continue
		}
		if p := decodeBody(t, got); p.Errors == nil || len(*p.Errors) != 1 || (*p.Errors)[0].Field != tc.field {
			t.Errorf("%s: errors %s, want one naming %q", tc.name, shorten(got), tc.field)
		}
		if !errors.Is(jerr, job.ErrNotFound) || !errors.Is(terr, asynq.ErrTaskNotFound) && !errors.Is(terr, asynq.ErrQueueNotFound) {
			t.Errorf("%s: refused, yet recorded (job: %v) or enqueued (task: %v)", tc.name, jerr, terr)
		}
		// The refusal is the key's stored outcome: a retry replays it.
		again, _ := serve(t, g.Handler(), http.MethodPost, "/v1/shipments", tc.body, header...)
		if again.StatusCode != http.StatusUnprocessableEntity || again.Header.Get(idempotency.HeaderReplayed) != "true" {
			t.Errorf("%s: the retry got %d (replayed %q), want the 422 replayed", tc.name, again.StatusCode, again.Header.Get(idempotency.HeaderReplayed))
		}
	}
}

// shorten keeps a failure's message readable when a body holds a long key.
func shorten(s string) string {
	if len(s) <= 600 {
		return s
	}
	return s[:300] + "…" + s[len(s)-300:]
}
