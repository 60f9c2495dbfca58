package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// clock is a fake time source: sleeping advances it and records the wait.
type clock struct {
	mu    sync.Mutex
	t     time.Time
	waits []time.Duration
	// onSleep, when set, runs before each recorded sleep returns.
	onSleep func(n int)
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.t = c.t.Add(d)
	n, hook := len(c.waits), c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return ctx.Err()
}

func (c *clock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

// seen is one request the fake gateway got.
type seen struct {
	method, path, key string
	header            http.Header
	body              []byte
}

// gateway plays an idemgate gateway: it answers the n-th request with the
// n-th reply (the last one repeats) and records what it got.
type gateway struct {
	srv     *httptest.Server
	mu      sync.Mutex
	got     []seen
	replies []reply
	// clk, when set, is moved on by each reply's held.
	clk *clock
}

// reply is one scripted answer; hangUp closes the connection instead.
type reply struct {
	status int
	header map[string]string
	body   string
	hangUp bool
	// held is how long the gateway holds the request before answering
	// (a GET with ?wait=), on gateway.clk.
	held time.Duration
}

func problemReply(status int, slug, detail string, header map[string]string) reply {
	h := map[string]string{"Content-Type": "application/problem+json"}
	for k, v := range header {
		h[k] = v
	}
	b, _ := json.Marshal(map[string]any{
		"type": "https://errors.example.com/p/" + slug, "title": slug, "status": status,
		"detail": detail, "instance": "/v1/payments", "request_id": "req-1",
	})
	return reply{status: status, header: h, body: string(b)}
}

func created(body string) reply {
	return reply{status: 201, header: map[string]string{"Content-Type": "application/json"}, body: body}
}

func newGateway(t *testing.T, replies ...reply) *gateway {
	t.Helper()
	g := &gateway{replies: replies}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.got = append(g.got, seen{method: r.Method, path: r.URL.RequestURI(), key: r.Header.Get("Idempotency-Key"), header: r.Header.Clone(), body: body})
	rp := g.replies[min(len(g.got), len(g.replies))-1]
	clk := g.clk
	g.mu.Unlock()
	if clk != nil && rp.held > 0 {
		clk.mu.Lock()
		clk.t = clk.t.Add(rp.held)
		clk.mu.Unlock()
	}
	if rp.hangUp {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rp.status)
	fmt.Fprint(w, rp.body)
}

func (g *gateway) requests() []seen {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]seen(nil), g.got...)
}

// testClient is a Client on g's server with the fake clock and the
// largest jitter, so every recorded wait is the backoff's ceiling.
func testClient(g *gateway, clk *clock, opts ...Option) *Client {
	c := New(g.srv.URL, append([]Option{WithHTTPClient(g.srv.Client())}, opts...)...)
	c.now, c.sleep = clk.now, clk.sleep
	c.randN = func(n int64) int64 { return n - 1 }
	return c
}
