package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// slugNotCancellable is the 409 of a cancel that came too late.
const slugNotCancellable = "job-not-cancellable"

// CancelJob cancels the job id (POST /v1/jobs/{id}/cancel), retrying as
// Do does (a cancel converges, so sending it again is safe), and returns
// the job document the gateway answered with. Its Status says what the
// cancel did: openapi.JobStatusCancelled (no attempt will start, or the
// job was already cancelled) or openapi.JobStatusCancelling (an attempt
// is in flight and its end decides: WaitJob returns the final status,
// succeeded or cancelled). A job that has succeeded or failed is a
// *ProblemError for which IsNotCancellable is true; an unknown job, or
// another tenant's, a 404 *ProblemError.
func (c *Client) CancelJob(ctx context.Context, id string) (Job, error) {
	path := "/v1/jobs/" + url.PathEscape(id) + "/cancel"
	resp, err := c.Do(ctx, http.MethodPost, path, nil)
	if err != nil {
		return Job{}, err
	}
	if resp.Status != http.StatusOK && resp.Status != http.StatusAccepted {
		return Job{}, fmt.Errorf("idemgate: POST %s answered %d, not 200 or 202", path, resp.Status)
	}
	return decodeJob(resp)
}

// IsNotCancellable reports whether err is a 409 job-not-cancellable: the
// job had already succeeded or failed when the cancel arrived.
func IsNotCancellable(err error) bool { return isSlug(err, slugNotCancellable) }
