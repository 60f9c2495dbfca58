package config

import (
	"fmt"

	"github.com/idemgate/idemgate/job"
)

// RouteBatch gives an enqueue route a batch path: one POST there submits
// up to MaxItems jobs of the route, each under its own key in the route's
// scope. The batch's bytes are bounded by the route's
// idempotency.max_request_bytes.
type RouteBatch struct {
	// Path is the batch path, such as /v1/emails:batch. Required; no
	// other route may match it.
	Path string `yaml:"path"`
	// MaxItems is the most items one batch holds, at most 1000 (
	// job.MaxBatchItems). Default 100.
	MaxItems int `yaml:"max_items"`
}

// JobsBatch configures the batch paths of every enqueue route.
type JobsBatch struct {
	// RequireItemKeys refuses, with 400 naming the items, a batch whose
	// items do not each carry an idempotency_key. Default false: an item
	// without one is keyed by the batch's key, a colon and its index.
	RequireItemKeys bool `yaml:"require_item_keys"`
}

// defaultBatchMaxItems is RouteBatch.MaxItems when it is not written.
const defaultBatchMaxItems = 100

func (c *Config) batchDefaults() {
	for i := range c.Routes {
		if b := c.Routes[i].Batch; b != nil {
			setDefault(&b.MaxItems, defaultBatchMaxItems)
		}
	}
}

// validateBatches checks each route's batch: on an enqueue route with an
// exact path, at a path no other route or batch matches.
func (c *Config) validateBatches(bad badFunc) {
	paths := map[string]string{}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Path != "" {
			paths[r.Path] = fmt.Sprintf("routes[%d].path", i)
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		b := r.Batch
		if b == nil {
			continue
		}
		p := fmt.Sprintf("routes[%d].batch", i)
		switch {
		case r.Enqueue == nil:
			bad(p, "applies to enqueue routes only")
		case r.Path == "":
			bad(p, "needs a route with path, not path_prefix")
		case c.debounceBatchProblem(r.Enqueue.Task) != "":
			bad(p, "%s", c.debounceBatchProblem(r.Enqueue.Task))
		}
		switch b.Path {
		case "":
			bad(p+".path", "required")
		default:
			if msg := pathProblem(b.Path); msg != "" {
				bad(p+".path", "%s", msg)
			} else if other, ok := paths[b.Path]; ok {
				bad(p+".path", "%s is already routed by %s", b.Path, other)
			} else {
				paths[b.Path] = p + ".path"
			}
		}
		if b.MaxItems < 1 || b.MaxItems > job.MaxBatchItems {
			bad(p+".max_items", "%d is outside 1..%d", b.MaxItems, job.MaxBatchItems)
		}
	}
}
