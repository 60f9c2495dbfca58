package gateway

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log destination the test reads while the gateway writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for l := range strings.Lines(s.b.String()) {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// basic is the value of HTTP Basic credentials, without the scheme.
func basic(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// adminGateway is a gateway whose admin guard reads *now and logs to the
// returned buffer, and a call of its admin listener from peer (RemoteAddr)
// with the Authorization header auth ("" sends none).
func adminGateway(t *testing.T, now *time.Time, opts Options) (*Gateway, *syncBuffer, func(peer, path, auth string) (*http.Response, string)) {
	t.Helper()
	logs := &syncBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	opts.Routes = nil
	g := newTestGateway(t, opts)
	g.adminGuard.now = func() time.Time { return *now }
	admin := g.AdminHandler()
	return g, logs, func(peer, path, auth string) (*http.Response, string) {
		t.Helper()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil)
		req.RemoteAddr = peer
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, req)
		resp := rec.Result()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
}

// TestAdminTokenGuessing: a peer that sends ten wrong admin tokens within
// a minute is answered 429 rate-limited with Retry-After for a minute,
// even with the right token; another peer is not; the refusals are
// counted on /metrics by reason; the wrong tokens are logged, naming the
// peer, at most one line a second; requests without credentials are
// counted but never throttle; and after the minute the peer's right
// token is let through again.
func TestAdminTokenGuessing(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	_, logs, get := adminGateway(t, &now, testOptions(nil))
	const (
		guesser = "203.0.113.7:50123"
		other   = "198.51.100.9:40000"
		browser = "192.0.2.44:41000"
		right   = "Bearer " + testAdminToken
	)

	for i := range DefaultAdminMaxAuthFailures {
		auth := fmt.Sprintf("Bearer guess-%d", i)
		if i%2 == 1 {
			auth = "Basic " + basic("admin", fmt.Sprintf("guess-%d", i)) // a browser's form counts the same
		}
		if resp, b := get(guesser, "/admin/keys/acme/payments/k", auth); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d %s, want 401", i+1, resp.StatusCode, b)
		}
	}
	for _, auth := range []string{"Bearer guess-next", right} {
		resp, b := get(guesser, "/metrics", auth)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" ||
			!strings.Contains(b, `/rate-limited"`) || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("the guesser after %d wrong tokens, with %q: %d Retry-After %q %s; want 429 rate-limited, Retry-After 60",
				DefaultAdminMaxAuthFailures, auth, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	for range 2 * DefaultAdminMaxAuthFailures {
		if resp, b := get(browser, "/admin/ui/", ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a request without credentials: %d %s, want 401", resp.StatusCode, b)
		}
	}
	if resp, b := get(other, "/admin/keys/acme/payments/k", "Bearer wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("another peer's wrong token: %d %s, want 401", resp.StatusCode, b)
	}
	resp, metrics := get(other, "/metrics", right)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another peer's right token while the guesser is refused: %d %s, want 200", resp.StatusCode, metrics)
	}
	for _, want := range []string{
		fmt.Sprintf(`idemgate_admin_auth_failures_total{reason="wrong"} %d`, DefaultAdminMaxAuthFailures+1),
		`idemgate_admin_auth_failures_total{reason="throttled"} 2`,
		fmt.Sprintf(`idemgate_admin_auth_failures_total{reason="missing"} %d`, 2*DefaultAdminMaxAuthFailures),
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}

	// All of that came within one second: one line, naming the first peer.
	if l := logs.lines("admin token"); len(l) != 1 || !strings.Contains(l[0], "level=WARN") || !strings.Contains(l[0], "peer=203.0.113.7 ") {
		t.Fatalf("log lines of the wrong tokens within one second: %q; want one warning naming peer 203.0.113.7", l)
	}
	now = now.Add(2 * time.Second)
	get(other, "/metrics", "Bearer wrong again")
	if l := logs.lines("admin token"); len(l) != 2 || !strings.Contains(l[1], "peer=198.51.100.9 ") || !strings.Contains(l[1], fmt.Sprintf("unlogged=%d", DefaultAdminMaxAuthFailures)) {
		t.Fatalf("log lines a second later: %q; want a second naming peer 198.51.100.9 and the %d wrong tokens not logged",
			l, DefaultAdminMaxAuthFailures)
	}

	now = now.Add(AdminAuthWindow)
	if resp, b := get(guesser, "/metrics", right); resp.StatusCode != http.StatusOK {
		t.Fatalf("the guesser's right token a minute later: %d %s, want 200", resp.StatusCode, b)
	}
}

// TestAdminTokenGuessingPeers: an IPv6 peer is one /64, so a guesser
// cannot hop addresses within it; and the table of peers is bounded:
// peers beyond it share one entry, throttled together, while the peers
// in the table keep their own.
func TestAdminTokenGuessingPeers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	g, _, get := adminGateway(t, &now, testOptions(nil))
	const right = "Bearer " + testAdminToken

	for i := range DefaultAdminMaxAuthFailures {
		get(fmt.Sprintf("[2001:db8:0:7::%x]:443", i+1), "/metrics", "Bearer wrong")
	}
	if resp, _ := get("[2001:db8:0:7::ffff]:443", "/metrics", right); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("another address in the guessing /64: %d, want 429", resp.StatusCode)
	}
	if resp, _ := get("[2001:db8:0:8::1]:443", "/metrics", right); resp.StatusCode != http.StatusOK {
		t.Errorf("an address in the next /64: %d, want 200", resp.StatusCode)
	}

	g.adminGuard.mu.Lock()
	g.adminGuard.maxPeers = len(g.adminGuard.peers) + 1 // room for one more peer
	g.adminGuard.mu.Unlock()
	get("192.0.2.1:1000", "/metrics", "Bearer wrong") // the last peer with an entry of its own
	for i := range DefaultAdminMaxAuthFailures {
		get(fmt.Sprintf("198.51.100.%d:1000", i+1), "/metrics", "Bearer wrong")
	}
	if resp, _ := get("198.51.100.200:1000", "/metrics", right); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a peer beyond the table after %d wrong tokens from peers beyond it: %d, want 429", DefaultAdminMaxAuthFailures, resp.StatusCode)
	}
	if resp, _ := get("192.0.2.1:1000", "/metrics", right); resp.StatusCode != http.StatusOK {
		t.Errorf("a peer in the table with one wrong token: %d, want 200", resp.StatusCode)
	}
	g.adminGuard.mu.Lock()
	n, limit := len(g.adminGuard.peers), g.adminGuard.maxPeers
	g.adminGuard.mu.Unlock()
	if n > limit+1 {
		t.Errorf("%d peers held for a table of %d", n, limit)
	}
}

// TestAdminTokenGuessingOff: admin max_auth_failures -1 refuses no peer;
// the wrong tokens are still counted.
func TestAdminTokenGuessingOff(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	opts := testOptions(nil)
	opts.AdminMaxAuthFailures = -1
	_, _, get := adminGateway(t, &now, opts)
	for range 3 * DefaultAdminMaxAuthFailures {
		get("203.0.113.7:1", "/metrics", "Bearer wrong")
	}
	resp, b := get("203.0.113.7:1", "/metrics", "Bearer "+testAdminToken)
	if resp.StatusCode != http.StatusOK || !strings.Contains(b, fmt.Sprintf(`idemgate_admin_auth_failures_total{reason="wrong"} %d`, 3*DefaultAdminMaxAuthFailures)) {
		t.Errorf("the right token after %d wrong ones with the throttle off: %d; want 200 and the wrong ones counted", 3*DefaultAdminMaxAuthFailures, resp.StatusCode)
	}
}
