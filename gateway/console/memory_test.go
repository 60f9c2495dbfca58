package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// onlyKeys hides a store's Recent, as the Redis store has none.
type onlyKeys struct{ console.Keys }

// A gateway without PostgreSQL or Redis (store memory): the pages say
// what they cannot show instead of failing, and keys are listed only when
// the store can list them.
func TestConsoleWithoutDatabase(t *testing.T) {
	t.Parallel()
	mem := memstore.New()
	scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k1"}
	if _, err := mem.Claim(t.Context(), idempotency.ClaimRequest{Scope: scope, Fingerprint: "f", Owner: "o", Lease: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	serve := func(keys console.Keys, path string) (int, string) {
		t.Helper()
		h, err := console.New(console.Options{Stories: &explain.Explainer{Keys: mem}, Keys: keys, StoreName: "redis"})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		name, path string
		keys       console.Keys
		status     int
		want, not  string
	}{
		{"overview", "/admin/ui/", mem, 200, "Jobs are kept in PostgreSQL", `id="queues-link"`},
		{"jobs", "/admin/ui/jobs", mem, 200, "Jobs are kept in PostgreSQL", `id="jobs"`},
		{"listed", "/admin/ui/keys?tenant=acme&route=payments", mem, 200, `data-key="k1" data-state="in_flight"`, "Listing keys needs"},
		{"not listable", "/admin/ui/keys?tenant=acme&route=payments", onlyKeys{mem}, 200, "Listing keys needs store postgres or memory; store redis", `id="keys"`},
		{"key", "/admin/ui/keys/acme/payments/k1", mem, 200, `id="record-state" class="state state-in_flight"`, `id="action-resolve"`},
		{"unknown key", "/admin/ui/keys/acme/payments/nope", mem, 404, `class="flash error"`, ""},
		{"bad status", "/admin/ui/jobs?status=lost", mem, 400, `class="flash error"`, ""},
		{"bad age", "/admin/ui/jobs?older_than=soon", mem, 400, "older_than is a duration", ""},
		{"no such page", "/admin/ui/nothing", mem, 404, `class="flash error"`, ""},
	} {
		status, body := serve(c.keys, c.path)
		if status != c.status || !strings.Contains(body, c.want) || c.not != "" && strings.Contains(body, c.not) {
			t.Errorf("%s: GET %s: %d, want %d with %q and without %q\n%s", c.name, c.path, status, c.status, c.want, c.not, body)
		}
	}
}
