package e2e

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

func TestKeysCommand(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	up := newUpstream(t)
	// A delete from the CLI reaches the running gateway's replay cache
	// only when its entries expire: keep them briefly.
	cfg := writeConfig(t, "postgres", dbURL, redisURL, up.srv.URL, "replay_cache: {ttl: 100ms}\n")
	g := startGateway(t, cfg)
	key := "cli-" + randomID()
	send(t, g.public, req{path: "/v1/payments", key: key})
	send(t, g.public, req{path: "/v1/hang", key: key}) // held as unknown

	code, out, errOut := cli(t, nil, "keys", "get", "acme", "payments", key, "--config", cfg)
	if code != 0 || !strings.Contains(out, `"state": "completed"`) || !strings.Contains(out, `"status": 201`) {
		t.Fatalf("keys get: exit %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli(t, nil, "keys", "resolve", "acme", "payments", key, "--config", cfg); code != 1 || !strings.Contains(errOut, "not unknown") {
		t.Fatalf("resolve of a completed record: exit %d %s", code, errOut)
	}
	code, out, _ = cli(t, nil, "keys", "resolve", "acme", "hang", key, "--config", cfg)
	if code != 0 || !strings.Contains(out, `"state": "released"`) {
		t.Fatalf("keys resolve: exit %d %s", code, out)
	}
	if code, _, _ := cli(t, nil, "keys", "delete", "acme", "payments", key, "--config", cfg); code != 0 {
		t.Fatalf("keys delete: exit %d", code)
	}
	if code, _, errOut := cli(t, nil, "keys", "get", "acme", "payments", key, "--config", cfg); code != 1 || !strings.Contains(errOut, "no idempotency record") {
		t.Fatalf("get after delete: exit %d %s", code, errOut)
	}
	if code, _, errOut := cli(t, nil, "keys", "get", "acme", "nosuchroute", key, "--config", cfg); code != 2 || !strings.Contains(errOut, "no route named") {
		t.Fatalf("unknown route: exit %d %s", code, errOut)
	}
	// The record is gone, so the same request runs again once the
	// gateway's cached copy has expired.
	time.Sleep(200 * time.Millisecond)
	if r := send(t, g.public, req{path: "/v1/payments", key: key}); r.header.Get("Idempotent-Replayed") != "" || up.count("/v1/payments", key) != 2 {
		t.Fatalf("after delete the key must run again")
	}
	code, out, _ = cli(t, map[string]string{"DATABASE_URL": dbURL}, "migrate", "status")
	if code != 0 || !strings.Contains(out, "00001_idempotency.sql") || strings.Contains(out, "pending") {
		t.Fatalf("migrate status: exit %d %s", code, out)
	}
}

// Two gateway instances with rate_limit_store: redis share one budget.
func TestSharedRateLimit(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	up := newUpstream(t)
	// A tenant name unique to this run keeps the Redis bucket fresh.
	tenant := "t" + randomID()
	extra := "rate_limit_store: redis\n"
	cfg := writeConfig(t, "memory", dbURL, redisURL, up.srv.URL, extra)
	body, _ := os.ReadFile(cfg)
	body = bytes.Replace(body, []byte("name: tiny"), []byte("name: "+tenant), 1)
	cfg = writeFile(t, "shared.yaml", string(body))
	a, b := startGateway(t, cfg), startGateway(t, cfg)
	statuses := []int{}
	for i, g := range []*gatewayProc{a, b, a, b} {
		r := send(t, g.public, req{path: "/v1/payments", key: "rl-" + strconv.Itoa(i) + randomID(), apiKey: "tiny-key"})
		statuses = append(statuses, r.status)
	}
	if statuses[0] != 201 || statuses[1] != 201 || statuses[2] != 429 || statuses[3] != 429 {
		t.Fatalf("statuses across two instances %v, want [201 201 429 429] (one budget of 2)", statuses)
	}
}

// TestLogFlags: --log-format text and --log-level override the file.
func TestLogFlags(t *testing.T) {
	redisURL := testkit.RedisURL(t)
	up := newUpstream(t)
	cfg := writeConfig(t, "memory", "", redisURL, up.srv.URL, "")
	p := runInProcess("serve", "--config", cfg, "--log-format", "text", "--log-level", "debug")
	testkit.Eventually(t, "gateway listening", 30*time.Second, func() bool { return addrs(p.out.String())["public"] != "" })
	pub := addrs(p.out.String())["public"]
	send(t, pub, req{path: "/v1/payments", key: "log-" + randomID()})
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	log := p.errOut.String()
	if !strings.Contains(log, "level=INFO msg=listening") || !strings.Contains(log, "msg=request") || strings.Contains(log, `{"time"`) {
		t.Fatalf("--log-format text: want text lines, got:\n%s", tail(log, 2000))
	}
}
