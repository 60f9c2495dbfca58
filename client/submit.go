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

// Job is the job document of an enqueue route's 202 and of
// GET /v1/jobs/{id}.
type Job = openapi.Job

// SubmitJob posts payload to an enqueue route (path, such as
// /v1/shipments) with Do's retrying, and returns the job document of the
// 202 answer. A retry, or a later call with the same WithKey, names the
// same job. An answer other than 202 is an error: a *ProblemError for a
// 4xx or 5xx (IsInvalidPayload for a payload the job's schema refuses), a
// plain error for another status or a body that is not a job document.
func (c *Client) SubmitJob(ctx context.Context, path string, payload any, opts ...CallOption) (Job, error) {
	resp, err := c.Do(ctx, http.MethodPost, path, payload, opts...)
	if err != nil {
		return Job{}, err
	}
	if resp.Status != http.StatusAccepted {
		return Job{}, fmt.Errorf("idemgate: POST %s answered %d, not 202 Accepted: not an enqueue route", path, resp.Status)
	}
	return decodeJob(resp)
}

// WaitJob polls GET /v1/jobs/{id} until the job has ended, and returns its
// final document. A job that failed (its attempts used up, or a permanent
// error; it is in the dead-letter queue) or was cancelled is returned with
// a nil error: the caller reads Status and Error. Polls start MinBackoff apart and the gap
// doubles up to MaxBackoff; each poll is a Do, so a transient error is
// retried. WaitJob waits as long as ctx lets it: give ctx a deadline. When
// ctx ends, or a poll fails, it returns the last document it read (zero
// before the first) with the error.
func (c *Client) WaitJob(ctx context.Context, id string) (Job, error) {
	path := "/v1/jobs/" + url.PathEscape(id)
	var last Job
	for n := 1; ; n++ {
		resp, err := c.Do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return last, err
		}
		if resp.Status != http.StatusOK {
			return last, fmt.Errorf("idemgate: GET %s answered %d, not 200", path, resp.Status)
		}
		j, err := decodeJob(resp)
		if err != nil {
			return last, err
		}
		last = j
		if finalStatus(j.Status) {
			return j, nil
		}
		if err := c.sleep(ctx, c.pollInterval(n)); err != nil {
			return last, fmt.Errorf("idemgate: waiting for job %s (%s): %w", id, last.Status, err)
		}
	}
}

// pollInterval is the wait after poll n, with equal jitter: uniform in
// [ceiling/2, ceiling], so polls never come back to back.
func (c *Client) pollInterval(n int) time.Duration {
	half := c.ceiling(n) / 2
	return half + time.Duration(c.randN(int64(half)+1))
}

func decodeJob(resp *Response) (Job, error) {
	var j Job
	if err := json.Unmarshal(resp.Body, &j); err != nil {
		return Job{}, fmt.Errorf("idemgate: decoding the job document: %w", err)
	}
	if j.Id == "" || j.Status == "" {
		return Job{}, fmt.Errorf("idemgate: the answer is not a job document: %.200s", resp.Body)
	}
	return j, nil
}
