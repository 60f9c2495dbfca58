package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/idemgate/idemgate/openapi"
)

// BatchItem is one job of a batch: the payload a single submit would
// post, under its own key in the route's scope.
type BatchItem struct {
	// Key is the item's Idempotency-Key in the route's scope. Empty: the
	// gateway keys it by the batch's key, a colon and its index (unless
	// it requires item keys).
	Key string
	// Payload is the job's body, encoded as JSON.
	Payload any
	// Delay, in whole seconds, or NotBefore schedules the job, as a
	// single submit's Idemgate-Delay or Idemgate-Not-Before would. Zero:
	// the job's own delay.
	Delay     time.Duration
	NotBefore time.Time
}

// BatchResult is the answer of a batch path: each item's status and job
// document or problem, as a single submit with its key would have had
// them.
type BatchResult = openapi.BatchResult

// BatchState counts a batch's jobs by status (GET /v1/batches/{id}).
type BatchState = openapi.BatchState

// batchItem is a BatchItem on the wire.
type batchItem struct {
	IdempotencyKey *string `json:"idempotency_key,omitempty"`
	Body           any     `json:"body"`
	Delay          *int64  `json:"delay,omitempty"`
	NotBefore      *string `json:"not_before,omitempty"`
}

// SubmitBatch posts items to a route's batch path (path, such as
// /v1/emails:batch) with Do's retrying, under the batch's key (WithKey, or
// one Do makes): a retry replays the whole answer. With atomic, an item
// that would be refused refuses the batch (a *ProblemError with slug
// batch-refused, whose Errors name the items) and nothing is recorded;
// without it, each refused item carries its problem in the result and
// the others are accepted. An answer other than 200 is an error.
func (c *Client) SubmitBatch(ctx context.Context, path string, items []BatchItem, atomic bool, opts ...CallOption) (BatchResult, error) {
	body := struct {
		Items  []batchItem `json:"items"`
		Atomic bool        `json:"atomic"`
	}{Items: make([]batchItem, len(items)), Atomic: atomic}
	for i, it := range items {
		w := batchItem{Body: it.Payload}
		if it.Key != "" {
			w.IdempotencyKey = &it.Key
		}
		if it.Delay > 0 {
			secs := int64(it.Delay / time.Second)
			w.Delay = &secs
		}
		if !it.NotBefore.IsZero() {
			s := it.NotBefore.UTC().Format(time.RFC3339Nano)
			w.NotBefore = &s
		}
		body.Items[i] = w
	}
	resp, err := c.Do(ctx, http.MethodPost, path, body, opts...)
	if err != nil {
		return BatchResult{}, err
	}
	if resp.Status != http.StatusOK {
		return BatchResult{}, fmt.Errorf("idemgate: POST %s answered %d, not 200: not a batch path", path, resp.Status)
	}
	var res BatchResult
	if err := json.Unmarshal(resp.Body, &res); err != nil || res.BatchId == "" {
		return BatchResult{}, fmt.Errorf("idemgate: the answer is not a batch result: %.200s", resp.Body)
	}
	return res, nil
}

// GetBatch counts the jobs of batch id by status; with wait > 0 the
// gateway holds the answer until they are all final, at most wait (in
// whole seconds, capped by its jobs_api.max_wait).
func (c *Client) GetBatch(ctx context.Context, id string, wait time.Duration) (BatchState, error) {
	path := "/v1/batches/" + url.PathEscape(id)
	if secs := int64(wait / time.Second); secs > 0 {
		path += fmt.Sprintf("?wait=%d", secs)
	}
	resp, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return BatchState{}, err
	}
	var st BatchState
	if err := json.Unmarshal(resp.Body, &st); err != nil || st.BatchId == "" {
		return BatchState{}, fmt.Errorf("idemgate: the answer is not a batch: %.200s", resp.Body)
	}
	return st, nil
}
