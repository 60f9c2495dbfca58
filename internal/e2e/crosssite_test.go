package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// auth.cross_site reaches the gateway: with auth.mode header it is refuse
// unless written, so a cross-site POST is refused with 403 before it
// reaches the upstream, and a request without a browser's headers is
// served; written allow, the cross-site POST is served too.
func TestCrossSiteSetting(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	for _, tc := range []struct {
		name, setting string
		crossSite     int
	}{
		{"default", "", http.StatusForbidden},
		{"allow", ", cross_site: allow", http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeFile(t, "idemgate.yaml", configHead("memory", "", "")+`auth: {mode: header, header: X-Tenant`+tc.setting+`}
tenants:
  - name: acme
routes:
  - {name: orders, methods: [POST], path: /v1/orders, upstream: "`+up.URL+`"}
`)
			g := startGateway(t, cfg)
			post := func(key string, header ...string) int {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.public+"/v1/orders", strings.NewReader("x=1"))
				req.Header.Set("X-Tenant", "acme")
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				for i := 0; i+1 < len(header); i += 2 {
					req.Header.Set(header[i], header[i+1])
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				return resp.StatusCode
			}
			before := reached.Load()
			if got := post(tc.name+"-cross", "Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"); got != tc.crossSite {
				t.Errorf("a cross-site POST: %d, want %d", got, tc.crossSite)
			}
			if got := post(tc.name + "-curl"); got != http.StatusCreated {
				t.Errorf("a POST without a browser: %d, want 201", got)
			}
			want := int64(1)
			if tc.crossSite == http.StatusCreated {
				want = 2
			}
			if n := reached.Load() - before; n != want {
				t.Errorf("the upstream got %d requests, want %d", n, want)
			}
		})
	}
}
