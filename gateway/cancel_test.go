package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
)

// fakeCanceller is fakeJobs that also cancels: each job id answers as
// the table of TestCancelAnswers says.
type fakeCanceller struct {
	fakeJobs
	cancel func(tenant *string, id string) (job.Row, bool, error)
}

func (f fakeCanceller) Cancel(_ context.Context, tenant, id string) (job.Row, bool, error) {
	return f.cancel(&tenant, id)
}

func (f fakeCanceller) CancelByID(_ context.Context, id string) (job.Row, bool, error) {
	return f.cancel(nil, id)
}

// TestCancelAnswers: each outcome of a cancel is one answer, on the
// tenant's endpoint and the admin one alike, and the tenant's cancel is
// scoped to the tenant.
func TestCancelAnswers(t *testing.T) {
	t.Parallel()
	jobs := fakeCanceller{cancel: func(tenant *string, id string) (job.Row, bool, error) {
		if tenant != nil && *tenant != "acme" {
			return job.Row{}, false, job.ErrNotFound
		}
		switch id {
		case "job_queued":
			return job.Row{ID: id, Task: "invoice.create", Status: job.StatusCancelled}, false, nil
		case "job_running":
			return job.Row{ID: id, Task: "invoice.create", Status: job.StatusCancelling}, true, nil
		case "job_cancelling":
			return job.Row{ID: id, Task: "invoice.create", Status: job.StatusCancelling}, false, nil
		case "job_done":
			return job.Row{ID: id, Status: job.StatusSucceeded}, false, job.ErrNotCancellable
		case "job_down":
			return job.Row{}, false, errors.New("connection refused")
		}
		return job.Row{}, false, job.ErrNotFound
	}}
	g := newTestGateway(t, testOptions(jobs))
	tests := []struct {
		id     string
		status int
		want   string // the job's status, or the problem's slug
	}{
		{"job_queued", http.StatusOK, "cancelled"},
		{"job_running", http.StatusAccepted, "cancelling"},
		{"job_cancelling", http.StatusOK, "cancelling"},
		{"job_done", http.StatusConflict, "job-not-cancellable"},
		{"job_unknown", http.StatusNotFound, "not-found"},
		{"job_down", http.StatusServiceUnavailable, "queue-unavailable"},
	}
	for _, tc := range tests {
		for _, side := range []struct {
			name string
			h    http.Handler
			auth string
			path string
		}{
			{"tenant", g.Handler(), "Bearer " + testAPIKey, "/v1/jobs/" + tc.id + "/cancel"},
			{"admin", g.AdminHandler(), "Bearer " + testAdminToken, "/admin/jobs/" + tc.id + "/cancel"},
		} {
			t.Run(side.name+" "+tc.id, func(t *testing.T) {
				t.Parallel()
				resp, body := serve(t, side.h, http.MethodPost, side.path, "", "Authorization", side.auth)
				if resp.StatusCode != tc.status {
					t.Fatalf("POST %s: %d %s, want %d", side.path, resp.StatusCode, body, tc.status)
				}
				var doc struct {
					Status any
					Type   string
				}
				if err := json.Unmarshal([]byte(body), &doc); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode < 300 && doc.Status != tc.want || resp.StatusCode >= 300 && !strings.HasSuffix(doc.Type, "/"+tc.want) {
					t.Fatalf("POST %s: %s, want %s", side.path, body, tc.want)
				}
				// A cancel answers with the job document, and so with its
				// ETag, the one GET gives the same document.
				if resp.StatusCode < 300 {
					var d openapi.Job
					if err := json.Unmarshal([]byte(body), &d); err != nil {
						t.Fatal(err)
					}
					if got, want := resp.Header.Get("ETag"), jobETag(d); got != want || got == "" {
						t.Fatalf("POST %s: ETag %q, want %q", side.path, got, want)
					}
				}
			})
		}
	}
	// Without credentials, and for another tenant, nothing is cancelled.
	if resp, _ := serve(t, g.Handler(), http.MethodPost, "/v1/jobs/job_queued/cancel", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("cancel without credentials: %d, want 401", resp.StatusCode)
	}
	if resp, _ := serve(t, g.AdminHandler(), http.MethodPost, "/admin/jobs/job_queued/cancel", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("admin cancel without the token: %d, want 401", resp.StatusCode)
	}
}
