package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
)

// TestUnstorableRequests: what PostgreSQL cannot hold — U+0000, bytes that
// are not UTF-8, a lone surrogate, a number past numeric's bounds — in an
// enqueue body or a path is the client's mistake, answered 400 or 404 with
// a problem document. It used to reach the database, fail there (SQLSTATE
// 22021) and come back as 503: the key released, the client retrying for
// ever. A refused body's 400 is the key's stored outcome, so the retry
// replays it.
func TestUnstorableRequests(t *testing.T) {
	pool := testkit.Pool(t)
	queue, _, qname := testkit.Queue(t, "unstorable")
	opts := testOptions(job.NewSubmitter(pool, queue))
	opts.Routes[0].Enqueue.Queue = qname
	store := pgstore.New(pool)
	t.Cleanup(store.Close)
	opts.Store = store
	g := newTestGateway(t, opts)
	run := testkit.Prefix()
	auth := []string{"Authorization", "Bearer " + testAPIKey}

	type problem struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
		Errors []struct {
			Field, Message string
		} `json:"errors"`
	}
	check := func(resp *http.Response, body string, status int, slug string) problem {
		t.Helper()
		var p problem
		if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal([]byte(body), &p) != nil || !strings.HasSuffix(p.Type, "/"+slug) {
			t.Fatalf("%d %s %s, want %d %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, status, slug)
		}
		return p
	}
	recorded := func(key string) bool {
		t.Helper()
		_, err := store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "invoices", Key: key})
		if err != nil && !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	for _, tc := range []struct {
		name, contentType, body, field string
		// stored: the job's validation refused it, inside the claim, so
		// its 400 is the key's outcome; otherwise the middleware refused
		// it before claiming anything.
		stored bool
	}{
		{"NUL", "application/json", `{"order_id":"o-1\u0000","amount_cents":100,"currency":"EUR"}`, "order_id", true},
		{"NUL in a name", "application/json", `{"order_id":"o-1","amount_cents":100,"currency":"EUR","\u0000":1}`, "", true},
		{"huge number", "application/json", `{"order_id":"o-1","amount_cents":1e131072,"currency":"EUR"}`, "amount_cents", true},
		{"not UTF-8, no media type", "", "{\"order_id\":\"o-\xff\",\"amount_cents\":100,\"currency\":\"EUR\"}", "order_id", true},
		{"lone surrogate, no media type", "", `{"order_id":"\udc00","amount_cents":100,"currency":"EUR"}`, "order_id", true},
		{"not UTF-8", "application/json", "{\"order_id\":\"o-\xff\",\"amount_cents\":100,\"currency\":\"EUR\"}", "", false},
		{"lone surrogate", "application/json", `{"order_id":"\ud800","amount_cents":100,"currency":"EUR"}`, "", false},
		{"duplicate name", "application/json", `{"order_id":"o-1","amount_cents":100,"amount_cents":999,"currency":"EUR"}`, "", false},
	} {
		key := run + strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
		header := append([]string{"Idempotency-Key", key}, auth...)
		if tc.contentType != "" {
			header = append(header, "Content-Type", tc.contentType)
		}
		for attempt := range 2 {
			resp, body := serve(t, g.Handler(), http.MethodPost, "/v1/invoices", tc.body, header...)
			p := check(resp, body, http.StatusBadRequest, "bad-request")
			if replayed := resp.Header.Get(idempotency.HeaderReplayed) == "true"; replayed != (tc.stored && attempt == 1) {
				t.Errorf("%s, attempt %d: replayed %v", tc.name, attempt+1, replayed)
			}
			if tc.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != tc.field) {
				t.Errorf("%s: errors %+v, want one naming %q", tc.name, p.Errors, tc.field)
			}
		}
		if recorded(key) != tc.stored {
			t.Errorf("%s: record stored %v, want %v", tc.name, !tc.stored, tc.stored)
		}
		if _, err := opts.Jobs.Get(t.Context(), "acme", job.ID("acme", "invoices", key)); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("%s: a job was recorded (%v)", tc.name, err)
		}
	}

	for _, path := range []string{"/v1/jobs/%00", "/v1/jobs/job_%00", "/v1/jobs/%FF", "/v1/jobs/%ff", "/v1/jobs/%C3"} {
		resp, body := serve(t, g.Handler(), http.MethodGet, path, "", auth...)
		check(resp, body, http.StatusNotFound, "not-found")
	}
	admin := []string{"Authorization", "Bearer " + testAdminToken}
	for _, path := range []string{"/admin/keys/%00/invoices/k", "/admin/keys/acme/invoices/%FF", "/admin/keys/acme/in%00voices/k"} {
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			resp, body := serve(t, g.AdminHandler(), method, path, "", admin...)
			check(resp, body, http.StatusNotFound, "not-found")
		}
		resp, body := serve(t, g.AdminHandler(), http.MethodPost, path+"/resolve", "", admin...)
		check(resp, body, http.StatusNotFound, "not-found")
	}
}
