package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
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

// WaitJob waits until the job has ended and returns its final document.
// A job that failed (its attempts used up, or a permanent error; it is in
// the dead-letter queue) or was cancelled is returned with a nil error:
// the caller reads Status and Error.
//
// Each call is a GET /v1/jobs/{id}?wait= that the gateway holds until the
// job is final or its document changes (If-None-Match with the last
// ETag), at most MaxJobWait (the gateway caps it at its jobs_api.max_wait,
// and the http.Client's Timeout, when set, lowers it). A gateway that
// does not hold (one older than the wait, or with no database listener)
// answers at once with the document unchanged: WaitJob then polls,
// MinBackoff apart at first and doubling up to MaxBackoff, never back to
// back. Each GET is a Do, so a transient error is retried. WaitJob waits
// as long as ctx lets it: give ctx a deadline. When ctx ends, or a GET
// fails, it returns the last document it read (zero before the first)
// with the error.
func (c *Client) WaitJob(ctx context.Context, id string) (Job, error) {
	path := "/v1/jobs/" + url.PathEscape(id)
	wait := MaxJobWait
	if c.hc.Timeout > 0 {
		// The answer must come before the client gives up on it.
		wait = min(wait, c.hc.Timeout-jobWaitMargin)
	}
	query := ""
	if secs := int(wait / time.Second); secs > 0 {
		query = "?wait=" + strconv.Itoa(secs)
	}
	var (
		last  Job
		etag  string
		polls = 0 // answers in a row the gateway gave at once, unchanged
	)
	for {
		var opts []CallOption
		if etag != "" {
			opts = append(opts, WithHeader("If-None-Match", etag))
		}
		start := c.now()
		resp, err := c.Do(ctx, http.MethodGet, path+query, nil, opts...)
		if err != nil {
			return last, err
		}
		unchanged := etag != "" && resp.Status == http.StatusNotModified
		switch resp.Status {
		case http.StatusNotModified:
			if etag == "" {
				return last, fmt.Errorf("idemgate: GET %s answered 304 to a request without If-None-Match", path)
			}
		case http.StatusOK:
			j, err := decodeJob(resp)
			if err != nil {
				return last, err
			}
			// Without If-None-Match a gateway that holds answers a job
			// that has not ended only at the end of the wait.
			unchanged = etag == "" || sameJob(j, last)
			last, etag = j, resp.Header.Get("ETag")
		default:
			return last, fmt.Errorf("idemgate: GET %s answered %d, not 200", path, resp.Status)
		}
		if final(last.Status) {
			return last, nil
		}
		if !unchanged || c.now().Sub(start) >= heldAtLeast {
			polls = 0
			continue // the gateway held the GET, or the job moved
		}
		polls++
		if err := c.sleep(ctx, c.pollInterval(polls)); err != nil {
			return last, fmt.Errorf("idemgate: waiting for job %s (%s): %w", id, last.Status, err)
		}
	}
}

// MaxJobWait is the longest WaitJob asks the gateway to hold one GET.
const MaxJobWait = 30 * time.Second

const (
	// jobWaitMargin keeps a held GET shorter than the http.Client's
	// Timeout.
	jobWaitMargin = 5 * time.Second
	// heldAtLeast: an unchanged answer sooner than this was not held.
	heldAtLeast = 500 * time.Millisecond
)

// final reports whether a job with status s has ended.
func final(s openapi.JobStatus) bool {
	switch s {
	case openapi.JobStatusSucceeded, openapi.JobStatusFailed, openapi.JobStatusCancelled:
		return true
	}
	return false
}

// sameJob compares two documents of a job without their ETags (a gateway
// that sends none).
func sameJob(a, b Job) bool {
	return a.Status == b.Status && a.Attempts == b.Attempts && a.UpdatedAt.Equal(b.UpdatedAt)
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
