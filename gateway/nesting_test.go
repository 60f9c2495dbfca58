package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/problem"
)

// nested is a payload for deepSpec whose arrays and objects nest depth
// levels deep, the payload object itself the first.
func nested(depth int) string {
	return `{"order_id":"o-1","x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}"
}

// deepSpec takes any object with an order_id, however deep, so that only
// the nesting bound can refuse a payload.
var deepSpec = func() *job.Spec {
	spec, err := job.NewSpec("deep.take", []byte(`{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"string"}}}`), "deep:{order_id}", "")
	if err != nil {
		panic(err)
	}
	return spec
}()

// Finding 1: a job payload nested deeper than jobs_api.max_depth (64) is
// refused at submit with 422 invalid-payload naming the bound, before a
// job is recorded, so the worker, the receiver and the console never read
// it. A proxied route's body is not bounded: it is only fingerprinted, in
// time linear in its size, and forwarded as sent.
func TestDeepPayloadIsRefused(t *testing.T) {
	pool := testkit.Pool(t)
	queue, _, queueName := testkit.Queue(t, "deep")
	run := testkit.Prefix()
	gateway := func(maxDepth int) *Gateway {
		opts := testOptions(job.NewSubmitter(pool, queue))
		opts.MaxDepth = maxDepth
		opts.Routes = []RouteOptions{{Name: "deep", Methods: []string{http.MethodPost}, Path: "/v1/deep",
			Enqueue: &EnqueueOptions{Spec: deepSpec, Queue: queueName}}}
		return newTestGateway(t, opts)
	}
	submit := func(g *Gateway, key, body string) (*http.Response, string) {
		return serve(t, g.Handler(), http.MethodPost, "/v1/deep", body,
			"Authorization", "Bearer "+testAPIKey, "Idempotency-Key", run+key, "Content-Type", "application/json")
	}
	recorded := func(key string) bool {
		t.Helper()
		_, err := job.NewStore(pool).Get(t.Context(), "acme", job.ID("acme", "deep", run+key))
		if err != nil && !errors.Is(err, job.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	def, wide := gateway(0), gateway(100)
	for _, tc := range []struct {
		name   string
		g      *Gateway
		depth  int
		status int
	}{
		{"at the default bound", def, 64, http.StatusAccepted},
		{"one past the default bound", def, 65, http.StatusUnprocessableEntity},
		{"ten thousand deep", def, 10000, http.StatusUnprocessableEntity},
		{"under a wider bound", wide, 100, http.StatusAccepted},
		{"past a wider bound", wide, 101, http.StatusUnprocessableEntity},
	} {
		key := strings.ReplaceAll(tc.name, " ", "-")
		resp, body := submit(tc.g, key, nested(tc.depth))
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
		if recorded(key) != (tc.status == http.StatusAccepted) {
			t.Errorf("%s: job recorded %v, want %v", tc.name, !(tc.status == http.StatusAccepted), tc.status == http.StatusAccepted)
		}
		if tc.status == http.StatusAccepted {
			continue
		}
		p := decodeBody(t, body)
		bound := "64"
		if tc.g == wide {
			bound = "100"
		}
		if resp.Header.Get("Content-Type") != "application/problem+json" || p.Type != problem.DefaultBase+"invalid-payload" ||
			!strings.Contains(p.Detail, "deeper than the "+bound+" levels") {
			t.Errorf("%s: %s %q %q, want problem+json invalid-payload naming the bound %s", tc.name, resp.Header.Get("Content-Type"), p.Type, p.Detail, bound)
		}
	}

	// Proxied: forwarded whole, however deep.
	proxied, got := encodingGateway(t)
	deep := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	if r, b := serve(t, proxied.Handler(), http.MethodPost, "/v1/orders", deep,
		"Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "deep", "Content-Type", "application/json"); r.StatusCode != http.StatusCreated {
		t.Fatalf("proxied 9000 deep: %d %s, want the upstream's 201", r.StatusCode, b)
	}
	if g := got(); len(g) != 1 || g[0] != "|"+deep {
		t.Errorf("the upstream received %d requests, want the deep body once", len(g))
	}
}
