package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/openapi"
)

const otherAPIKey = "bigco-key"

// batchGateway is a gateway on a PostgreSQL schema and an asynq queue of
// the test's own whose invoices route has the batch path
// /v1/invoices:batch; adjust changes its options first.
type batchGateway struct {
	g    *Gateway
	pool *pgxpool.Pool
	jobs *job.Submitter
}

func newBatchGateway(t *testing.T, adjust func(*Options)) batchGateway {
	t.Helper()
	pool := testkit.Pool(t)
	queue, _, qname := testkit.Queue(t, "batch")
	jobs := job.NewSubmitter(pool, queue)
	opts := testOptions(jobs)
	opts.Auth.Tenants = append(opts.Auth.Tenants, auth.TenantKeys{Name: "bigco", APIKeySHA256s: []string{hexSum(otherAPIKey)}})
	opts.Routes[0].Enqueue = &EnqueueOptions{Spec: invoiceSpec, Queue: qname, Batch: &BatchOptions{Path: "/v1/invoices:batch", MaxItems: 1000}}
	store := pgstore.New(pool)
	t.Cleanup(store.Close)
	opts.Store = store
	if adjust != nil {
		adjust(&opts)
	}
	return batchGateway{g: newTestGateway(t, opts), pool: pool, jobs: jobs}
}

func (bg batchGateway) post(t *testing.T, path, key, body string, apiKey ...string) (*http.Response, string) {
	t.Helper()
	k := testAPIKey
	if len(apiKey) > 0 {
		k = apiKey[0]
	}
	return serve(t, bg.g.Handler(), http.MethodPost, path, body,
		"Authorization", "Bearer "+k, "Idempotency-Key", key, "Content-Type", "application/json")
}

func (bg batchGateway) jobCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := bg.pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func invoiceBody(i int) string {
	return fmt.Sprintf(`{"order_id":"o-%d","amount_cents":%d,"currency":"EUR"}`, i, 100+i)
}

// batchBody is a batch whose items are keys[i] with invoiceBody(i), every
// fifth one delayed by an hour.
func batchBody(keys []string, atomic bool) string {
	var items []string
	for i, k := range keys {
		delay := ""
		if i%5 == 4 {
			delay = `,"delay":3600`
		}
		items = append(items, fmt.Sprintf(`{"idempotency_key":%q,"body":%s%s}`, k, invoiceBody(i), delay))
	}
	return fmt.Sprintf(`{"items":[%s],"atomic":%v}`, strings.Join(items, ","), atomic)
}

type batchAnswer struct {
	BatchID string `json:"batch_id"`
	Items   []struct {
		Index   int             `json:"index"`
		Status  int             `json:"status"`
		Job     json.RawMessage `json:"job"`
		Problem json.RawMessage `json:"problem"`
	} `json:"items"`
	Counts struct{ Accepted, Rejected int } `json:"counts"`
}

func decodeBatchAnswer(t *testing.T, body string) batchAnswer {
	t.Helper()
	var a batchAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("batch answer %s: %v", shorten(body), err)
	}
	return a
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out.String()
}

// One batch of 500 and the same 500 sent one by one to another gateway
// agree key by key: the same job ids, statuses and schedules. A request
// sent alone with an item's key replays the item's 202, and a retried
// batch replays the whole answer byte for byte.
func TestBatchAgreesWithSingleSubmits(t *testing.T) {
	batched, single := newBatchGateway(t, nil), newBatchGateway(t, nil)
	run := testkit.Prefix()
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sitem-%d", run, i)
	}
	body := batchBody(keys, false)
	resp, got := batched.post(t, "/v1/invoices:batch", run+"batch", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %d %s", resp.StatusCode, shorten(got))
	}
	ans := decodeBatchAnswer(t, got)
	if ans.Counts.Accepted != 500 || ans.Counts.Rejected != 0 || len(ans.Items) != 500 {
		t.Fatalf("batch counts %+v, %d items; want 500 accepted", ans.Counts, len(ans.Items))
	}
	if n := batched.jobCount(t); n != 500 {
		t.Fatalf("%d jobs recorded, want 500", n)
	}
	for i, k := range keys {
		header := []string{"Authorization", "Bearer " + testAPIKey, "Idempotency-Key", k, "Content-Type", "application/json"}
		if i%5 == 4 {
			header = append(header, HeaderDelay, "3600")
		}
		sresp, sgot := serve(t, single.g.Handler(), http.MethodPost, "/v1/invoices", invoiceBody(i), header...)
		if sresp.StatusCode != http.StatusAccepted {
			t.Fatalf("single %d: %d %s", i, sresp.StatusCode, sgot)
		}
		var one, item openapi.Job
		_ = json.Unmarshal([]byte(sgot), &one)
		it := ans.Items[i]
		if err := json.Unmarshal(it.Job, &item); err != nil || it.Index != i || it.Status != http.StatusAccepted {
			t.Fatalf("item %d: %+v (%v)", i, it, err)
		}
		if item.Id != one.Id || item.Status != one.Status || item.Task != one.Task || (item.NotBefore == nil) != (one.NotBefore == nil) {
			t.Fatalf("key %s: the batch's job %+v, the single request's %+v", k, item, one)
		}
		if i%50 == 0 || i%5 == 4 && i < 50 {
			// Sent alone to the batch's gateway, the item's key replays
			// its 202, the job document the batch answered with.
			rresp, rgot := serve(t, batched.g.Handler(), http.MethodPost, "/v1/invoices", invoiceBody(i), header...)
			if rresp.StatusCode != http.StatusAccepted || rresp.Header.Get(idempotency.HeaderReplayed) != "true" ||
				rresp.Header.Get("Location") != "/v1/jobs/"+item.Id || compact(t, []byte(rgot)) != compact(t, it.Job) {
				t.Fatalf("item %d sent alone: %d replayed=%q %s; want the item's 202 replayed", i, rresp.StatusCode, rresp.Header.Get(idempotency.HeaderReplayed), rgot)
			}
		}
	}
	again, againBody := batched.post(t, "/v1/invoices:batch", run+"batch", body)
	if again.StatusCode != http.StatusOK || again.Header.Get(idempotency.HeaderReplayed) != "true" || againBody != got {
		t.Fatalf("the retried batch: %d replayed=%q, same bytes %v", again.StatusCode, again.Header.Get(idempotency.HeaderReplayed), againBody == got)
	}
	if n := batched.jobCount(t); n != 500 {
		t.Fatalf("%d jobs after the replays, want 500", n)
	}
}

// A single request first, then a batch holding its key: the same body
// replays its 202 as the item's answer (the same job); another body fails
// that item with 422 key reused, and the other items go on.
func TestBatchItemKeyUsedAlone(t *testing.T) {
	bg := newBatchGateway(t, nil)
	run := testkit.Prefix()
	resp, first := bg.post(t, "/v1/invoices", run+"a", invoiceBody(0))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("single: %d %s", resp.StatusCode, first)
	}
	var firstJob openapi.Job
	_ = json.Unmarshal([]byte(first), &firstJob)
	body := fmt.Sprintf(`{"items":[{"idempotency_key":%q,"body":%s},{"idempotency_key":%q,"body":%s},{"idempotency_key":%q,"body":%s}]}`,
		run+"a", invoiceBody(0), run+"b", invoiceBody(1), run+"a2", invoiceBody(2))
	resp, got := bg.post(t, "/v1/invoices:batch", run+"batch-1", body)
	ans := decodeBatchAnswer(t, got)
	if resp.StatusCode != http.StatusOK || ans.Counts.Accepted != 3 {
		t.Fatalf("batch: %d %s", resp.StatusCode, got)
	}
	if compact(t, ans.Items[0].Job) != compact(t, []byte(first)) {
		t.Fatalf("item 0 (key of the single request, same body): %s, want its 202 %s", ans.Items[0].Job, first)
	}

	body = fmt.Sprintf(`{"items":[{"idempotency_key":%q,"body":%s},{"idempotency_key":%q,"body":%s}]}`,
		run+"a", invoiceBody(9), run+"c", invoiceBody(3))
	resp, got = bg.post(t, "/v1/invoices:batch", run+"batch-2", body)
	ans = decodeBatchAnswer(t, got)
	if resp.StatusCode != http.StatusOK || ans.Counts.Accepted != 1 || ans.Counts.Rejected != 1 {
		t.Fatalf("batch with a reused key: %d %s", resp.StatusCode, got)
	}
	var p struct {
		Type           string `json:"type"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	_ = json.Unmarshal(ans.Items[0].Problem, &p)
	if ans.Items[0].Status != http.StatusUnprocessableEntity || p.Type != "https://idemgate.dev/problems/idempotency-key-reused" || p.IdempotencyKey != run+"a" {
		t.Fatalf("item 0 (key reused with another body): %d %s, want 422 idempotency-key-reused naming its key", ans.Items[0].Status, ans.Items[0].Problem)
	}
	if ans.Items[1].Status != http.StatusAccepted {
		t.Fatalf("item 1: %d %s, want 202", ans.Items[1].Status, ans.Items[1].Problem)
	}
	if n := bg.jobCount(t); n != 4 {
		t.Fatalf("%d jobs, want 4 (a, b, a2, c)", n)
	}
}

// Refusals of the whole batch record nothing and claim no key: two items
// with one key (400 naming them), an atomic batch with one bad item (422
// naming it), a batch over the tenant's rate limit (429 with
// Retry-After). Each key is then free for a request sent alone.
func TestBatchRefusalsRecordNothing(t *testing.T) {
	bg := newBatchGateway(t, func(o *Options) {
		o.RateLimits = ratelimit.Limits{"acme": {Tokens: 20, Interval: time.Hour}}
	})
	run := testkit.Prefix()
	k := func(s string) string { return run + s }

	for _, tc := range []struct {
		name, body string
		status     int
		slug       string
		fields     []string
	}{
		{"duplicate keys",
			fmt.Sprintf(`{"items":[{"idempotency_key":%q,"body":%s},{"idempotency_key":%q,"body":%s},{"idempotency_key":%q,"body":%s}]}`,
				k("d"), invoiceBody(0), k("e"), invoiceBody(1), k("d"), invoiceBody(2)),
			http.StatusBadRequest, "bad-request", []string{"/items/0/idempotency_key", "/items/2/idempotency_key"}},
		{"atomic with a bad item",
			fmt.Sprintf(`{"atomic":true,"items":[{"idempotency_key":%q,"body":%s},{"idempotency_key":%q,"body":{"order_id":"o-x"}}]}`,
				k("d"), invoiceBody(0), k("e")),
			http.StatusUnprocessableEntity, "batch-refused", []string{"/items/1"}},
		{"over the rate limit",
			batchBody([]string{k("d"), k("e"), k("f"), k("g"), k("h"), k("i"), k("j"), k("k"), k("l"), k("m"), k("n"), k("o"), k("p"), k("q"), k("r"), k("s"), k("t"), k("u"), k("v"), k("w"), k("x")}, false),
			http.StatusTooManyRequests, "rate-limited", nil},
	} {
		resp, got := bg.post(t, "/v1/invoices:batch", k(strings.ReplaceAll(tc.name, " ", "-")), tc.body)
		p := decodeBody(t, got)
		if resp.StatusCode != tc.status || p.Type != "https://idemgate.dev/problems/"+tc.slug {
			t.Errorf("%s: %d %s, want %d %s", tc.name, resp.StatusCode, shorten(got), tc.status, tc.slug)
			continue
		}
		var fields []string
		if p.Errors != nil {
			for _, f := range *p.Errors {
				fields = append(fields, f.Field)
			}
		}
		if fmt.Sprint(fields) != fmt.Sprint(tc.fields) {
			t.Errorf("%s: errors name %v, want %v", tc.name, fields, tc.fields)
		}
		if tc.status == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", tc.name)
		}
		if n := bg.jobCount(t); n != 0 {
			t.Fatalf("%s: %d jobs recorded, want none", tc.name, n)
		}
	}
	// No item key is held: each is new when sent alone with its body.
	for i, key := range []string{"d", "e"} {
		resp, got := bg.post(t, "/v1/invoices", k(key), invoiceBody(i))
		if resp.StatusCode != http.StatusAccepted || resp.Header.Get(idempotency.HeaderReplayed) != "" {
			t.Errorf("key %s sent alone after the refusals: %d replayed=%q %s, want a new 202", key, resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), got)
		}
	}
}

// Without require_item_keys an item without a key is keyed by the batch's
// key and its index, so a request sent alone with that key replays it;
// with it, such a batch is refused naming the items.
func TestBatchItemsWithoutKeys(t *testing.T) {
	for _, require := range []bool{false, true} {
		bg := newBatchGateway(t, func(o *Options) { o.RequireItemKeys = require })
		run := testkit.Prefix()
		body := fmt.Sprintf(`{"items":[{"idempotency_key":%q,"body":%s},{"body":%s},{"body":%s}]}`, run+"own", invoiceBody(0), invoiceBody(1), invoiceBody(2))
		resp, got := bg.post(t, "/v1/invoices:batch", run+"b", body)
		if require {
			p := decodeBody(t, got)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(p.Detail, "items 1, 2") || bg.jobCount(t) != 0 {
				t.Errorf("require_item_keys: %d %s, want 400 naming items 1, 2 and nothing recorded", resp.StatusCode, got)
			}
			continue
		}
		ans := decodeBatchAnswer(t, got)
		if resp.StatusCode != http.StatusOK || ans.Counts.Accepted != 3 {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
		alone, again := bg.post(t, "/v1/invoices", run+"b:2", invoiceBody(2))
		if alone.Header.Get(idempotency.HeaderReplayed) != "true" || compact(t, []byte(again)) != compact(t, ans.Items[2].Job) {
			t.Errorf("key b:2 sent alone: %d %s, want item 2's 202 replayed", alone.StatusCode, again)
		}
	}
}

// GET /v1/batches/{id} counts the batch's jobs by status, for its tenant
// only, and with ?wait= holds until every job is final.
func TestBatchGet(t *testing.T) {
	bg := newBatchGateway(t, nil)
	run := testkit.Prefix()
	resp, got := bg.post(t, "/v1/invoices:batch", run+"b", batchBody([]string{run + "0", run + "1", run + "2"}, false))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	ans := decodeBatchAnswer(t, got)
	if resp.Header.Get("Location") != "/v1/batches/"+ans.BatchID {
		t.Errorf("Location %q", resp.Header.Get("Location"))
	}
	get := func(query string, apiKey string) (*http.Response, batchStateDocument) {
		resp, got := serve(t, bg.g.Handler(), http.MethodGet, "/v1/batches/"+ans.BatchID+query, "", "Authorization", "Bearer "+apiKey)
		var doc batchStateDocument
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal([]byte(got), &doc); err != nil {
				t.Fatal(err)
			}
		}
		return resp, doc
	}
	if resp, doc := get("", testAPIKey); resp.StatusCode != http.StatusOK || doc.Items != 3 || doc.Accepted != 3 || doc.Counts["queued"] != 3 || doc.Final {
		t.Fatalf("GET: %d %+v, want 3 queued", resp.StatusCode, doc)
	}
	if resp, _ := get("", otherAPIKey); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's GET: %d, want 404", resp.StatusCode)
	}
	done := make(chan batchStateDocument, 1)
	go func() {
		_, doc := get("?wait=25", testAPIKey)
		done <- doc
	}()
	for i, it := range ans.Items {
		var j openapi.Job
		_ = json.Unmarshal(it.Job, &j)
		status := job.StatusSucceeded
		if i == 2 {
			status = job.StatusFailed
		}
		if err := bg.jobs.Records().SetStatus(t.Context(), j.Id, status, 1, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	doc := <-done
	if !doc.Final || doc.Counts["succeeded"] != 2 || doc.Counts["failed"] != 1 {
		t.Fatalf("GET ?wait=: %+v, want final with 2 succeeded and 1 failed", doc)
	}
}

// On a store that claims one record at a time (memory) the items are
// claimed and answered one by one, with the same outcome.
func TestBatchOnTheMemoryStore(t *testing.T) {
	bg := newBatchGateway(t, func(o *Options) { o.Store = memstore.New() })
	run := testkit.Prefix()
	keys := []string{run + "0", run + "1", run + "2"}
	body := batchBody(keys, false)
	resp, got := bg.post(t, "/v1/invoices:batch", run+"b", body)
	ans := decodeBatchAnswer(t, got)
	if resp.StatusCode != http.StatusOK || ans.Counts.Accepted != 3 || bg.jobCount(t) != 3 {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	alone, again := bg.post(t, "/v1/invoices", keys[1], invoiceBody(1))
	if alone.Header.Get(idempotency.HeaderReplayed) != "true" || compact(t, []byte(again)) != compact(t, ans.Items[1].Job) {
		t.Errorf("item 1's key sent alone: %d %s, want its 202 replayed", alone.StatusCode, again)
	}
	retry, retried := bg.post(t, "/v1/invoices:batch", run+"b", body)
	if retry.Header.Get(idempotency.HeaderReplayed) != "true" || retried != got {
		t.Errorf("the retried batch: %d, same bytes %v", retry.StatusCode, retried == got)
	}
}
