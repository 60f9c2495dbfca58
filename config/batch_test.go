package config

import (
	"strings"
	"testing"
)

// routes[].batch: its max_items defaults to 100 and is refused beyond
// 1000; it belongs on an enqueue route with an exact path, at a path no
// other route takes.
func TestRouteBatch(t *testing.T) {
	t.Parallel()
	const head = "store: redis\nredis_url: redis://127.0.0.1:6379/0\nadmin_listen: \"\"\nauth: {mode: none}\nroutes:\n"
	const invoices = "  - {name: invoices, methods: [POST], path: /v1/invoices, enqueue: {task: invoice.create}, batch: %s}\n"
	parse := func(routes string) (*Config, error) {
		return Parse([]byte(head+routes), "x.yaml", nil, WithDefaultJobs(exampleJobs(t)))
	}
	c, err := parse(strings.Replace(invoices, "%s", `{path: "/v1/invoices:batch"}`, 1) + "jobs_api: {batch: {require_item_keys: true}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Routes[0].Batch; b == nil || b.Path != "/v1/invoices:batch" || b.MaxItems != 100 || !c.JobsAPI.Batch.RequireItemKeys {
		t.Fatalf("batch %+v, require_item_keys %v", c.Routes[0].Batch, c.JobsAPI.Batch.RequireItemKeys)
	}
	for _, tc := range []struct{ name, routes, want string }{
		{"too many items", strings.Replace(invoices, "%s", `{path: "/v1/invoices:batch", max_items: 1001}`, 1), "routes[0].batch.max_items: 1001 is outside 1..1000"},
		{"no path", strings.Replace(invoices, "%s", `{max_items: 10}`, 1), "routes[0].batch.path: required"},
		{"a route's path", strings.Replace(invoices, "%s", `{path: /v1/invoices}`, 1), "routes[0].batch.path: /v1/invoices is already routed by routes[0].path"},
		{"on a proxied route", "  - {name: pay, path: /v1/pay, upstream: http://u, batch: {path: /v1/pay-batch}}\n", "routes[0].batch: applies to enqueue routes only"},
	} {
		_, err := parse(tc.routes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
