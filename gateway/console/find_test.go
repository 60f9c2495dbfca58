package console_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// The keys list pages to the end: 120 keys of one route, listed 50 at a
// time in key order, every one of them reached once by following "Next".
func TestKeysListPagesToTheEnd(t *testing.T) {
	v := setup(t)
	want := map[string]bool{}
	for i := range 120 {
		sc := idempotency.Scope{Tenant: "acme", Route: "pages", Key: fmt.Sprintf("key-%03d", i)}
		if res, err := v.store.Claim(t.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour}); err != nil || !res.Claimed {
			t.Fatalf("claim %v: %+v %v", sc, res, err)
		}
		want[sc.Key] = true
	}
	doc := v.page(t, "/admin/ui/keys?tenant=acme&route=pages")
	if n := len(keyRows(doc)); n != 50 {
		t.Fatalf("the most recent keys: %d rows, want 50", n)
	}
	all := byID(doc, "all-keys")
	if all == nil {
		t.Fatal("the keys list has no link to every key")
	}
	next, _ := attr(all, "href")
	seen, pages := map[string]bool{}, 0
	for next != "" {
		pages++
		if pages > 5 {
			t.Fatal("the keys list does not end")
		}
		doc = v.page(t, next)
		for _, k := range keyRows(doc) {
			if seen[k] {
				t.Errorf("key %s listed twice", k)
			}
			seen[k] = true
		}
		next = ""
		if a := byID(doc, "next-page"); a != nil {
			next, _ = attr(a, "href")
		}
	}
	if pages != 3 || len(seen) != len(want) {
		t.Errorf("paged %d keys in %d pages, want %d in 3", len(seen), pages, len(want))
	}
	if !strings.Contains(text(find(doc, func(n *html.Node) bool { return hasClass(n, "pager") })[0]), "every key is listed") {
		t.Error("the last page does not say it is the last")
	}
}

func keyRows(doc *html.Node) []string {
	var keys []string
	for _, row := range find(doc, func(n *html.Node) bool { return hasClass(n, "key") }) {
		k, _ := attr(row, "data-key")
		keys = append(keys, k)
	}
	return keys
}

// downConsole is a console whose PostgreSQL is unreachable and whose
// idempotency store (memory, as Redis would be) still answers.
func downConsole(t *testing.T) (*httptest.Server, *memstore.Store) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := memstore.New()
	h, err := console.New(console.Options{
		Stories: &explain.Explainer{DB: pool}, Keys: store, StoreName: "memory",
		Requests: gateway.NewRecentRequests(time.Now), Jobs: job.NewStore(pool), Schedules: job.NewSchedules(pool),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, store
}

func get(t *testing.T, url string) (int, *html.Node) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	doc, err := html.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, doc
}

// With PostgreSQL down the jobs list keeps its filters and says why it
// lists nothing, and a key's page shows the record its store still has,
// instead of a 503 page.
func TestPagesWithoutPostgreSQL(t *testing.T) {
	srv, store := downConsole(t)
	status, doc := get(t, srv.URL+console.DefaultPrefix+"/jobs?status=failed")
	if status != http.StatusOK {
		t.Fatalf("jobs list without PostgreSQL: %d, want 200", status)
	}
	if byID(doc, "job-filter") == nil {
		t.Error("the jobs list without PostgreSQL lost its filters")
	}
	if u := text(byID(doc, "unreadable")); !strings.Contains(u, "PostgreSQL could not be read") {
		t.Errorf("jobs #unreadable = %q", u)
	}

	sc := idempotency.Scope{Tenant: "acme", Route: "pages", Key: "k-down"}
	if res, err := store.Claim(t.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if err := store.Complete(t.Context(), sc, "o", idempotency.Response{Status: 201, Body: []byte(`{"ok":true}`)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	status, doc = get(t, srv.URL+console.DefaultPrefix+"/keys/acme/pages/k-down")
	if status != http.StatusOK {
		t.Fatalf("key page without PostgreSQL: %d, want 200", status)
	}
	if u := text(byID(doc, "unreadable")); !strings.Contains(u, "PostgreSQL could not be read") {
		t.Errorf("key #unreadable = %q", u)
	}
	if s := text(byID(doc, "record-state")); s != "completed" {
		t.Errorf("key record state %q, want completed", s)
	}
	if s := text(byID(doc, "stored-status")); s != "201" {
		t.Errorf("stored status %q, want 201", s)
	}

	status, doc = get(t, srv.URL+console.DefaultPrefix+"/jobs/job_nope")
	if status != http.StatusServiceUnavailable || !strings.Contains(text(byID(doc, "flash")), "could not be read") {
		t.Errorf("job page without PostgreSQL: %d %q, want 503 saying so", status, text(byID(doc, "flash")))
	}
}
