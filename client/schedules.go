package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/idemgate/idemgate/openapi"
)

// Schedule is a recurring schedule as the gateway shows it.
type Schedule = openapi.Schedule

// ScheduleDeclaration is what PutSchedule sends: the task, cron or every,
// the body of every fire and the policies.
type ScheduleDeclaration = openapi.ScheduleDeclaration

// slugScheduleQuota is the 422 of a schedule beyond the tenant's quota.
const slugScheduleQuota = "schedule-quota-exceeded"

// PutSchedule creates (true) or replaces (false) the tenant's schedule
// id (PUT /v1/schedules/{id}). A PUT converges, so it is retried as Do
// retries. An invalid declaration is a 422 *ProblemError naming each
// field at fault; one beyond the tenant's quota is a *ProblemError for
// which IsScheduleQuotaExceeded is true.
func (c *Client) PutSchedule(ctx context.Context, id string, d ScheduleDeclaration) (Schedule, bool, error) {
	path := "/v1/schedules/" + url.PathEscape(id)
	resp, err := c.Do(ctx, http.MethodPut, path, d)
	if err != nil {
		return Schedule{}, false, err
	}
	s, err := decodeSchedule(resp)
	return s, resp.Status == http.StatusCreated, err
}

// GetSchedule returns the tenant's schedule id, with its LastFire once
// a slot fired. An unknown id is a 404 *ProblemError.
func (c *Client) GetSchedule(ctx context.Context, id string) (Schedule, error) {
	resp, err := c.Do(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(id), nil)
	if err != nil {
		return Schedule{}, err
	}
	return decodeSchedule(resp)
}

// ListSchedules returns the tenant's schedules by id.
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	resp, err := c.Do(ctx, http.MethodGet, "/v1/schedules", nil)
	if err != nil {
		return nil, err
	}
	var list openapi.ScheduleList
	if err := json.Unmarshal(resp.Body, &list); err != nil || list.Schedules == nil {
		return nil, fmt.Errorf("idemgate: the answer is not a list of schedules: %.200s", resp.Body)
	}
	return list.Schedules, nil
}

// DeleteSchedule deletes the tenant's schedule id. The jobs it fired
// stay. An unknown id is a 404 *ProblemError.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(id), nil)
	return err
}

// PauseSchedule pauses the tenant's schedule id: its slots are recorded
// as skipped until ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, id string) (Schedule, error) {
	return c.scheduleAction(ctx, id, "pause")
}

// ResumeSchedule resumes the tenant's paused schedule id.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (Schedule, error) {
	return c.scheduleAction(ctx, id, "resume")
}

func (c *Client) scheduleAction(ctx context.Context, id, action string) (Schedule, error) {
	resp, err := c.Do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(id)+"/"+action, nil)
	if err != nil {
		return Schedule{}, err
	}
	return decodeSchedule(resp)
}

// TriggerSchedule fires the tenant's schedule id now and returns the
// job. The job id derives from the call's Idempotency-Key (WithKey, or a
// fresh one every retry of this call shares): the same key fires once.
func (c *Client) TriggerSchedule(ctx context.Context, id string, opts ...CallOption) (Job, error) {
	resp, err := c.Do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(id)+"/trigger", nil, opts...)
	if err != nil {
		return Job{}, err
	}
	return decodeJob(resp)
}

// IsScheduleQuotaExceeded reports whether err is a 422
// schedule-quota-exceeded: the tenant holds as many schedules as it may.
func IsScheduleQuotaExceeded(err error) bool { return isSlug(err, slugScheduleQuota) }

func decodeSchedule(resp *Response) (Schedule, error) {
	var s Schedule
	if err := json.Unmarshal(resp.Body, &s); err != nil || s.Id == "" {
		return Schedule{}, fmt.Errorf("idemgate: the answer is not a schedule: %.200s", resp.Body)
	}
	return s, nil
}
