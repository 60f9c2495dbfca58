package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/openapi"
)

// JobFilter selects the jobs ListJobs and AllJobs list; a zero field
// selects every job of the caller's tenant.
type JobFilter struct {
	// Status keeps the jobs in this status, as the job document shows it
	// (a scheduled job whose time has come is queued).
	Status openapi.JobStatus
	// Task keeps the jobs of this task.
	Task string
	// CreatedAfter and CreatedBefore keep the jobs created strictly after
	// and strictly before them.
	CreatedAfter, CreatedBefore time.Time
	// Limit is the most jobs a page holds, 1 to 500; 0 takes the
	// gateway's default, 50.
	Limit int
}

// JobPage is one page of ListJobs: its jobs, newest first, and the cursor
// of the next page, "" on the last.
type JobPage struct {
	Jobs       []Job
	NextCursor string
}

// ListJobs reads one page of the tenant's jobs (GET /v1/jobs), newest
// first: the first with cursor "", each next with the NextCursor of the
// page before and the same filter. Paging is by keyset: jobs submitted
// meanwhile never shift the pages still to come, so no job is listed
// twice or skipped. A filter the gateway refuses is a 400 *ProblemError
// whose Errors name each wrong parameter. Each page is a Do, so a
// transient error is retried.
func (c *Client) ListJobs(ctx context.Context, f JobFilter, cursor string) (JobPage, error) {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", string(f.Status))
	}
	if f.Task != "" {
		q.Set("task", f.Task)
	}
	if !f.CreatedAfter.IsZero() {
		q.Set("created_after", f.CreatedAfter.Format(time.RFC3339Nano))
	}
	if !f.CreatedBefore.IsZero() {
		q.Set("created_before", f.CreatedBefore.Format(time.RFC3339Nano))
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/v1/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return JobPage{}, err
	}
	if resp.Status != http.StatusOK {
		return JobPage{}, fmt.Errorf("idemgate: GET %s answered %d, not 200", path, resp.Status)
	}
	var doc openapi.JobList
	if err := json.Unmarshal(resp.Body, &doc); err != nil || doc.Items == nil {
		return JobPage{}, fmt.Errorf("idemgate: the answer is not a job list: %.200s", resp.Body)
	}
	page := JobPage{Jobs: doc.Items}
	if doc.NextCursor != nil {
		page.NextCursor = *doc.NextCursor
	}
	return page, nil
}

// AllJobs lists every job of the tenant that f selects, newest first,
// reading a page at a time as the loop asks for more:
//
//	for j, err := range c.AllJobs(ctx, client.JobFilter{Status: openapi.JobStatusFailed}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(j.Id, j.Error)
//	}
//
// A page that cannot be read ends the listing with its error (the Job
// beside it is zero). Jobs submitted while it runs are not listed: they
// are newer than the first page.
func (c *Client) AllJobs(ctx context.Context, f JobFilter) iter.Seq2[Job, error] {
	return func(yield func(Job, error) bool) {
		cursor := ""
		for {
			page, err := c.ListJobs(ctx, f, cursor)
			if err != nil {
				yield(Job{}, err)
				return
			}
			for _, j := range page.Jobs {
				if !yield(j, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			cursor = page.NextCursor
		}
	}
}
