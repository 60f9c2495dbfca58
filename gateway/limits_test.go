package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// fakeLimits is a Limits whose answers the test chooses.
type fakeLimits struct {
	defs    map[string]job.FlowLimit
	busiest func(ctx context.Context, name string, n int) ([]LimitUsage, error)
}

func (f fakeLimits) Limit(name string) (job.FlowLimit, bool) {
	l, ok := f.defs[name]
	return l, ok
}

func (f fakeLimits) Busiest(ctx context.Context, name string, n int) ([]LimitUsage, error) {
	return f.busiest(ctx, name, n)
}

func TestLimitGet(t *testing.T) {
	t.Parallel()
	used := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	var asked int
	limits := fakeLimits{
		defs: map[string]job.FlowLimit{"ship-api": {Name: "ship-api", Concurrency: 8, Rate: 20, Period: time.Second, Burst: 5}},
		busiest: func(_ context.Context, name string, n int) ([]LimitUsage, error) {
			asked = n
			return []LimitUsage{
				// 300ms ahead of the pace at 50ms a start: 6 starts ahead,
				// and the burst of 5 allows 4 of them, so the next start
				// waits 100ms.
				{Value: "acme", Holders: []string{"job_1#a", "job_2#b"}, Backlog: 300 * time.Millisecond, LastUsed: used},
				{Value: "globex", LastUsed: used.Add(-time.Minute)},
			}, nil
		},
	}
	opts := testOptions(nil)
	opts.Routes = nil
	opts.Limits = limits
	g := newTestGateway(t, opts)
	admin := g.AdminHandler()
	auth := []string{"Authorization", "Bearer " + testAdminToken}

	resp, body := serve(t, admin, http.MethodGet, "/admin/limits/ship-api?top=5", "", auth...)
	if resp.StatusCode != http.StatusOK || asked != 5 {
		t.Fatalf("GET /admin/limits/ship-api: %d (asked for %d values) %s", resp.StatusCode, asked, body)
	}
	want := `{
  "name": "ship-api",
  "concurrency": 8,
  "rate": "20/1s",
  "burst": 5,
  "values": [
    {
      "value": "acme",
      "held": 2,
      "holders": [
        "job_1#a",
        "job_2#b"
      ],
      "starts_ahead": 6,
      "next_start_in_ms": 100,
      "last_used_at": "2026-12-04T15:00:00Z"
    },
    {
      "value": "globex",
      "held": 0,
      "holders": [],
      "starts_ahead": 0,
      "next_start_in_ms": 0,
      "last_used_at": "2026-12-04T14:59:00Z"
    }
  ]
}
`
	if body != want {
		t.Errorf("body:\n%s\nwant:\n%s", body, want)
	}

	for _, tc := range []struct {
		name, target string
		header       []string
		status       int
		detail       string
	}{
		{"an unknown limit", "/admin/limits/label-api", auth, http.StatusNotFound, `no limit called \"label-api\" is declared under limits`},
		{"top out of range", "/admin/limits/ship-api?top=0", auth, http.StatusBadRequest, "top must be a whole number from 1 to 1000"},
		{"no admin token", "/admin/limits/ship-api", nil, http.StatusUnauthorized, ""},
	} {
		resp, body := serve(t, admin, http.MethodGet, tc.target, "", tc.header...)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, tc.detail) {
			t.Errorf("%s: %d %s %s; want %d with %q", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.detail)
		}
	}

	limits.busiest = func(context.Context, string, int) ([]LimitUsage, error) { return nil, errors.New("dial tcp: refused") }
	opts.Limits = limits
	resp, body = serve(t, newTestGateway(t, opts).AdminHandler(), http.MethodGet, "/admin/limits/ship-api", "", auth...)
	var p struct{ Type, Detail string }
	if err := json.Unmarshal([]byte(body), &p); err != nil || !strings.HasSuffix(p.Type, "/queue-unavailable") ||
		resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || strings.Contains(body, "refused") {
		t.Errorf("Redis down: %d %s; want 503 with Retry-After and no cause", resp.StatusCode, body)
	}
}

func TestLimitGetWithoutLimits(t *testing.T) {
	t.Parallel()
	opts := testOptions(nil)
	opts.Routes = nil
	g := newTestGateway(t, opts)
	resp, body := serve(t, g.AdminHandler(), http.MethodGet, "/admin/limits/ship-api", "", "Authorization", "Bearer "+testAdminToken)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "not-found") {
		t.Errorf("no limits configured: %d %s; want 404 not-found", resp.StatusCode, body)
	}
}
