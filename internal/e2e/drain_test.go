package e2e

import (
	"fmt"
	"github.com/idemgate/idemgate/internal/testkit"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeDrainsBeforeShuttingDown: asked to stop, `idemgate serve` with
// server.drain_delay answers /readyz 503 for that long while it still
// serves requests, each closing its connection, and then exits cleanly.
func TestServeDrainsBeforeShuttingDown(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	// The delay only has to outlast a few local requests; it is long so
	// that a loaded machine cannot close the listener before they are sent.
	cfg := fmt.Sprintf(`listen: "127.0.0.1:0"
admin_listen: "127.0.0.1:0"
admin_token_sha256: %q
store: memory
auth: {mode: none}
server: {drain_delay: 5s, shutdown_timeout: 20s}
routes:
  - {name: payments, methods: [POST], path: /v1/payments, upstream: %q}
`, sha(adminToken), up.srv.URL)
	g := startGateway(t, writeFile(t, "idemgate.yaml", cfg))
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	get := func(path string) (*http.Response, error) {
		resp, err := client.Get(g.public + path)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	post := func(key string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.public+"/v1/payments", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := get("/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz before the stop: %v %v", resp, err)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- g.stop() }()
	testkit.Eventually(t, "/readyz answering 503", 4*time.Second, func() bool {
		resp, err := get("/readyz")
		return err == nil && resp.StatusCode == http.StatusServiceUnavailable
	})
	resp, err := post("during-drain")
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("a request while draining: %v %v; want 201", resp, err)
	}
	if !resp.Close {
		t.Errorf("an answer while draining keeps its connection open")
	}
	if n := up.count("/v1/payments", "during-drain"); n != 1 {
		t.Errorf("the upstream saw the request %d times, want 1", n)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("serve ended with %v, want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after its drain delay and shutdown")
	}
	if _, err := get("/readyz"); err == nil {
		t.Errorf("the listener still answers after the shutdown")
	}
}
