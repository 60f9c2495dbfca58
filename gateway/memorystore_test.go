package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// TestMemoryStoreFull: with store memory bounded, answers of 1000 bytes
// fill it; then a new key is refused with 503 idempotency-store-full and
// Retry-After without reaching the upstream, a key the store holds is
// still replayed, the metrics say how full it is and what it refused, and
// once the records expire and the janitor deletes them a new key runs.
func TestMemoryStoreFull(t *testing.T) {
	t.Parallel()
	ran := 0
	now := time.Now()
	store := memstore.New(memstore.WithMaxBytes(8<<10), memstore.WithClock(func() time.Time { return now }))
	opts := testOptions(nil)
	opts.Store = store
	g, public := servePayments(t, opts, func(w http.ResponseWriter, r *http.Request) {
		ran++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, strings.Repeat("x", 1000))
	})
	post := func(key string) (*http.Response, string) {
		return fetch(t, public, http.MethodPost, "/v1/payments", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", key)
	}

	stored := 0
	var full *http.Response
	var body string
	for i := range 20 {
		resp, b := post(fmt.Sprintf("k%d", i))
		if resp.StatusCode != http.StatusCreated {
			full, body = resp, b
			break
		}
		stored++
	}
	if full == nil || stored < 2 {
		t.Fatalf("%d answers of 1000 bytes stored in 8 KiB and no refusal", stored)
	}
	if full.StatusCode != http.StatusServiceUnavailable || full.Header.Get("Content-Type") != "application/problem+json" ||
		full.Header.Get("Retry-After") == "" {
		t.Fatalf("a new key in a full store: %d %s Retry-After %q, want 503 problem+json with Retry-After",
			full.StatusCode, full.Header.Get("Content-Type"), full.Header.Get("Retry-After"))
	}
	var p struct {
		Type           string
		Retryable      bool
		IdempotencyKey string `json:"idempotency_key"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || !strings.HasSuffix(p.Type, "/idempotency-store-full") || !p.Retryable ||
		p.IdempotencyKey != fmt.Sprintf("k%d", stored) {
		t.Errorf("refusal document %s (%v), want a retryable idempotency-store-full naming its key", body, err)
	}
	if ran != stored {
		t.Errorf("the upstream ran %d times for %d stored answers: the refused request reached it", ran, stored)
	}

	resp, b := post("k0")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(idempotency.HeaderReplayed) != "true" || len(b) != 1000 {
		t.Errorf("a stored key while full: %d replayed %q, %d bytes; want the stored 201 replayed", resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), len(b))
	}

	m := g.opts.Metrics.Registry
	if n, err := testutil.GatherAndCount(m, "idemgate_memory_store_bytes", "idemgate_memory_store_max_bytes", "idemgate_memory_store_refusals_total"); err != nil || n != 3 {
		t.Fatalf("memory store series: %d, %v; want 3", n, err)
	}
	want := fmt.Sprintf(`
# HELP idemgate_memory_store_max_bytes idempotency.memory.max_bytes: past it the memory store refuses new keys.
# TYPE idemgate_memory_store_max_bytes gauge
idemgate_memory_store_max_bytes %d
# HELP idemgate_memory_store_refusals_total New keys the memory store refused because it held idempotency.memory.max_bytes, or their tenant its max_bytes_per_tenant (503 idempotency-store-full).
# TYPE idemgate_memory_store_refusals_total counter
idemgate_memory_store_refusals_total 1
`, 8<<10)
	if err := testutil.GatherAndCompare(m, strings.NewReader(want), "idemgate_memory_store_max_bytes", "idemgate_memory_store_refusals_total"); err != nil {
		t.Error(err)
	}
	if held := store.Bytes(); held < int64(stored)*1000 {
		t.Errorf("idemgate_memory_store_bytes = %d for %d stored answers of 1000 bytes", held, stored)
	}
	if n := testutil.ToFloat64(g.opts.Metrics.requests.WithLabelValues("payments", "store_full")); n != 1 {
		t.Errorf(`idemgate_requests_total{outcome="store_full"} = %v, want 1`, n)
	}

	now = now.Add(idempotency.DefaultRetention + time.Hour)
	if n, err := store.DeleteExpired(t.Context(), 1000); err != nil || n != stored || store.Bytes() != 0 {
		t.Fatalf("janitor: deleted %d of %d (%v), %d bytes left", n, stored, err, store.Bytes())
	}
	if resp, _ := post(fmt.Sprintf("k%d", stored)); resp.StatusCode != http.StatusCreated {
		t.Errorf("the refused key once the janitor freed room: %d, want 201", resp.StatusCode)
	}
}

// TestMemoryStoreTenantShare: with store memory and a share per tenant,
// tenant acme fills its share and is refused a new key with 503
// idempotency-store-full, while tenant globex's new keys, as many as acme
// stored, still reach the upstream and get its 201, and acme's stored
// keys still replay.
func TestMemoryStoreTenantShare(t *testing.T) {
	t.Parallel()
	const globexKey = "globex-api-key"
	ran := map[string]int{}
	opts := testOptions(nil)
	opts.Auth.Tenants = append(opts.Auth.Tenants, auth.TenantKeys{Name: "globex", APIKeySHA256s: []string{hexSum(globexKey)}})
	opts.Store = memstore.New(memstore.WithMaxBytes(32<<10), memstore.WithMaxBytesPerTenant(8<<10))
	_, public := servePayments(t, opts, func(w http.ResponseWriter, r *http.Request) {
		ran[r.Header.Get("Idemgate-Tenant")]++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, strings.Repeat("x", 1000))
	})
	post := func(apiKey, key string) (*http.Response, string) {
		return fetch(t, public, http.MethodPost, "/v1/payments", "Authorization", "Bearer "+apiKey, "Idempotency-Key", key)
	}

	stored := 0
	var full *http.Response
	var body string
	for i := range 20 {
		resp, b := post(testAPIKey, fmt.Sprintf("k%d", i))
		if resp.StatusCode != http.StatusCreated {
			full, body = resp, b
			break
		}
		stored++
	}
	if full == nil || stored < 2 {
		t.Fatalf("acme stored %d answers of 1000 bytes in its 8 KiB share and was never refused", stored)
	}
	if full.StatusCode != http.StatusServiceUnavailable || full.Header.Get("Retry-After") == "" || !strings.Contains(body, "/idempotency-store-full") {
		t.Fatalf("acme's new key past its share: %d Retry-After %q %s; want 503 idempotency-store-full with Retry-After",
			full.StatusCode, full.Header.Get("Retry-After"), body)
	}

	for i := range stored {
		resp, b := post(globexKey, fmt.Sprintf("k%d", i))
		if resp.StatusCode != http.StatusCreated || resp.Header.Get(idempotency.HeaderReplayed) != "" {
			t.Fatalf("globex's new key %d while acme's share is full: %d %s; want the upstream's 201", i, resp.StatusCode, b)
		}
	}
	if ran["acme"] != stored || ran["globex"] != stored {
		t.Errorf("the upstream ran acme %d and globex %d times; want %d each", ran["acme"], ran["globex"], stored)
	}
	if resp, _ := post(testAPIKey, "k0"); resp.StatusCode != http.StatusCreated || resp.Header.Get(idempotency.HeaderReplayed) != "true" {
		t.Errorf("acme's stored key while its share is full: %d replayed %q; want its 201 replayed", resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed))
	}
}
