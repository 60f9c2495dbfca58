package cannedproblem_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/cannedproblem"
)

// The answers net/http's server makes by itself arrive as problem
// documents; a handler's answers pass as they are.
func TestServerAnswersAreProblems(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		MaxHeaderBytes: 1 << 10,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "hello")
		}),
	}
	go func() { _ = srv.Serve(cannedproblem.Listener(ln, "https://idemgate.dev/problems/")) }()
	defer srv.Close()

	for _, tc := range []struct {
		name, request string
		status        int
		detail        string
	}{
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431, "headers are larger"},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"malformed", "GET / HTTP/1.1\r\nHost x\r\n\r\n", 400, "malformed"},
		{"unknown transfer encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zstd\r\n\r\n", 501, "transfer encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := roundTrip(t, ln.Addr().String(), tc.request)
			defer resp.Body.Close()
			var p struct {
				Type      string `json:"type"`
				Status    int    `json:"status"`
				Detail    string `json:"detail"`
				Instance  string `json:"instance"`
				RequestID string `json:"request_id"`
				Retryable *bool  `json:"retryable"`
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q, want application/problem+json", ct)
			}
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || p.Status != tc.status || p.Type != "https://idemgate.dev/problems/bad-request" ||
				!strings.Contains(p.Detail, tc.detail) || p.Retryable == nil || *p.Retryable ||
				p.Instance != "urn:uuid:"+p.RequestID || resp.Header.Get("X-Request-Id") != p.RequestID {
				t.Fatalf("answer %d %+v", resp.StatusCode, p)
			}
		})
	}

	resp := roundTrip(t, ln.Addr().String(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("a handler's answer was changed: %d %v %q", resp.StatusCode, resp.Header, body)
	}
}

func roundTrip(t *testing.T, addr, request string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
