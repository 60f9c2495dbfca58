package e2e

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// requestsTotal reads idemgate_requests_total{outcome,route} from a scrape.
func requestsTotal(t *testing.T, g *gatewayProc, route, outcome string) float64 {
	t.Helper()
	m := adminDo(t, g, "GET", "/metrics", adminToken)
	want := `idemgate_requests_total{outcome="` + outcome + `",route="` + route + `"} `
	sc := bufio.NewScanner(bytes.NewReader(m.body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", sc.Text(), err)
			}
			return f
		}
	}
	return 0
}

// Every request outcome moves its series by exactly one.
func TestRequestMetrics(t *testing.T) {
	redisURL := testkit.RedisURL(t)
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, "memory", "", redisURL, up.srv.URL, ""))
	run := randomID()
	// The original of a replay and of a mismatch.
	send(t, g.public, req{path: "/v1/payments", key: run + "-used"})
	slowDone := make(chan resp, 1)
	go func() { slowDone <- send(t, g.public, req{path: "/v1/slow/held?ms=1500", key: run + "-slow"}) }()
	testkit.Eventually(t, "slow original upstream", 20*time.Second, func() bool { return up.count("/v1/slow/held", run+"-slow") == 1 })

	tests := []struct {
		outcome, route string
		q              req
	}{
		{"new", "payments", req{path: "/v1/payments", key: run + "-new"}},
		{"replay", "payments", req{path: "/v1/payments", key: run + "-used"}},
		{"mismatch", "payments", req{path: "/v1/payments", key: run + "-used", body: `{"other":1}`}},
		{"conflict", "held", req{path: "/v1/slow/held?ms=1500", key: run + "-slow"}},
		{"missing_key", "payments", req{path: "/v1/payments"}},
		{"invalid_key", "payments", req{path: "/v1/payments", key: "a b"}},
		{"too_large", "payments", req{path: "/v1/payments", key: run + "-big", body: `{"p":"` + strings.Repeat("x", 5000) + `"}`}},
		{"unauthorized", "payments", req{path: "/v1/payments", key: run + "-anon", apiKey: "nope"}},
		{"rate_limited", "payments", req{path: "/v1/payments", key: run + "-rl", apiKey: "tiny-key"}},
	}
	// tiny has two requests an hour: use them up first.
	send(t, g.public, req{path: "/v1/payments", key: run + "-t1", apiKey: "tiny-key"})
	send(t, g.public, req{path: "/v1/payments", key: run + "-t2", apiKey: "tiny-key"})
	for _, tc := range tests {
		before := requestsTotal(t, g, tc.route, tc.outcome)
		send(t, g.public, tc.q)
		if after := requestsTotal(t, g, tc.route, tc.outcome); after != before+1 {
			t.Errorf("%s: idemgate_requests_total{route=%q,outcome=%q} went %v → %v, want +1", tc.outcome, tc.route, tc.outcome, before, after)
		}
	}
	<-slowDone
}
