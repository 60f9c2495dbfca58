package e2e

import (
	"fmt"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
)

// TestServeRedisWait: idemgate serve with store redis and
// idempotency.redis_wait answers a new key once the replica holds it, and
// while the replica is stopped refuses new keys with 503 without calling
// the upstream.
func TestServeRedisWait(t *testing.T) {
	primary, replica := testkit.RedisReplicated(t)
	up := newUpstream(t)
	cfg := configHead("redis", "", "redis://"+primary.Addr()+"/0") + fmt.Sprintf(`auth: {mode: api_key}
tenants:
  - name: acme
    api_key_sha256: [%q]
idempotency:
  redis_wait: {replicas: 1, timeout: 1s}
  store_timeout: 3s
routes:
  - {name: payments, methods: [POST], path_prefix: /v1/payments, upstream: %q}
`, sha("acme-key"), up.srv.URL)
	g := startGateway(t, writeFile(t, "idemgate.yaml", cfg))

	if r := send(t, g.public, req{path: "/v1/payments", key: "in-sync"}); r.status != 201 || up.count("/v1/payments", "in-sync") != 1 {
		t.Fatalf("replica attached: %d %s after %d upstream calls, want 201 from one", r.status, r.body, up.count("/v1/payments", "in-sync"))
	}
	resume := replica.Stop(t)
	defer resume()
	r := send(t, g.public, req{path: "/v1/payments", key: "behind"})
	if r.status != 503 || r.problemType(t) != "idempotency-store-unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("replica stopped: %d %s, want 503 idempotency-store-unavailable with Retry-After", r.status, r.body)
	}
	if n := up.count("/v1/payments", "behind"); n != 0 {
		t.Fatalf("replica stopped: the upstream was called %d times, want 0", n)
	}
}
