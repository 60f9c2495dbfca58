package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// The admin endpoint reads and sets a real pool's weights in Redis; its
// jobs, submitted through a Submitter, show as the tenants' backlog.
func TestFairnessAdmin(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	spec, err := job.NewSpec("fair.admin", []byte(`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`), "{id}", "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Fairness = "tenants"
	fair, err := job.NewFairness(rdb, []job.FairPool{{Name: "tenants", DefaultWeight: 1, Weights: map[string]float64{"acme": 3}, Window: 16}}, []*job.Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	fair.Prefix = testkit.Prefix()
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), fair.Prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"}) // pooled jobs never reach it here
	t.Cleanup(func() { _ = client.Close() })
	sub := job.NewSubmitter(testkit.Pool(t), client)
	sub.Fairness = fair
	for _, id := range []string{"1", "2", "3"} {
		if _, err := sub.Submit(t.Context(), job.Request{Tenant: "acme", Route: "r", Key: id, Spec: spec, Body: []byte(`{"id":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}

	opts := testOptions(nil)
	opts.Routes = nil
	opts.Fairness = fair
	admin := newTestGateway(t, opts).AdminHandler()
	auth := []string{"Authorization", "Bearer " + testAdminToken}

	resp, body := serve(t, admin, http.MethodGet, "/admin/fairness/tenants", "", auth...)
	want := `{
  "name": "tenants",
  "window": 16,
  "default_weight": 1,
  "weights": {
    "acme": 3
  },
  "in_flight": 0,
  "tenants": [
    {
      "tenant": "acme",
      "weight": 3,
      "ready": 3,
      "delayed": 0,
      "in_flight": 0
    }
  ]
}
`
	if resp.StatusCode != http.StatusOK || body != want {
		t.Errorf("GET: %d\n%s\nwant:\n%s", resp.StatusCode, body, want)
	}

	resp, body = serve(t, admin, http.MethodPut, "/admin/fairness/tenants", `{"default_weight": 2, "weights": {"bigco": 0.5}}`, auth...)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"default_weight": 2,`) || !strings.Contains(body, `"bigco": 0.5`) ||
		strings.Contains(body, `"acme": 3`) || !strings.Contains(body, `"weight": 2,`) {
		t.Errorf("PUT: %d %s; want the new weights, acme at the new default", resp.StatusCode, body)
	}
	if _, body := serve(t, admin, http.MethodGet, "/admin/fairness/tenants", "", auth...); !strings.Contains(body, `"bigco": 0.5`) {
		t.Errorf("GET after PUT: %s; want the weights set", body)
	}

	for _, tc := range []struct {
		name, method, target, body string
		header                     []string
		status                     int
		detail                     string
	}{
		{"an unknown pool", http.MethodGet, "/admin/fairness/others", "", auth, http.StatusNotFound, `no fairness pool called \"others\"`},
		{"PUT an unknown pool", http.MethodPut, "/admin/fairness/others", `{"default_weight": 1}`, auth, http.StatusNotFound, `no fairness pool called \"others\"`},
		{"a zero weight", http.MethodPut, "/admin/fairness/tenants", `{"default_weight": 1, "weights": {"acme": 0}}`, auth, http.StatusBadRequest, `weights[\"acme\"] must be a positive finite number, not 0`},
		{"a negative default", http.MethodPut, "/admin/fairness/tenants", `{"default_weight": -1}`, auth, http.StatusBadRequest, "default_weight must be a positive finite number, not -1"},
		{"no default", http.MethodPut, "/admin/fairness/tenants", `{"weights": {"acme": 2}}`, auth, http.StatusBadRequest, "default_weight is required"},
		{"an unknown field", http.MethodPut, "/admin/fairness/tenants", `{"default_weight": 1, "window": 3}`, auth, http.StatusBadRequest, `unknown field \"window\"`},
		{"a weight out of range", http.MethodPut, "/admin/fairness/tenants", `{"default_weight": 1e999}`, auth, http.StatusBadRequest, "the body must be"},
		{"no admin token", http.MethodPut, "/admin/fairness/tenants", `{"default_weight": 1}`, nil, http.StatusUnauthorized, ""},
	} {
		resp, body := serve(t, admin, tc.method, tc.target, tc.body, tc.header...)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, tc.detail) {
			t.Errorf("%s: %d %s %s; want %d with %q", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.detail)
		}
	}
	if _, body := serve(t, admin, http.MethodGet, "/admin/fairness/tenants", "", auth...); !strings.Contains(body, `"bigco": 0.5`) {
		t.Errorf("after refused PUTs: %s; want the weights set before", body)
	}
}

func TestFairnessAdminWithoutPools(t *testing.T) {
	t.Parallel()
	opts := testOptions(nil)
	opts.Routes = nil
	admin := newTestGateway(t, opts).AdminHandler()
	resp, body := serve(t, admin, http.MethodGet, "/admin/fairness/tenants", "", "Authorization", "Bearer "+testAdminToken)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no fairness pool") {
		t.Errorf("GET without pools: %d %s; want 404", resp.StatusCode, body)
	}
}
