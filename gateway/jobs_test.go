package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
)

// The job document's status is openapi.yaml's JobStatus enum, generated
// apart from job.Status: both must name the same statuses, or a job would
// show a status its description does not list.
func TestJobStatusesAreTheDescribedEnum(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas struct {
				JobStatus struct {
					Enum []string `json:"enum"`
				} `json:"JobStatus"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapi.SpecJSON, &doc); err != nil {
		t.Fatal(err)
	}
	described := slices.Sorted(slices.Values(doc.Components.Schemas.JobStatus.Enum))
	var defined []string
	for _, s := range job.Statuses() {
		defined = append(defined, string(s))
	}
	slices.Sort(defined)
	if !slices.Equal(described, defined) {
		t.Fatalf("openapi.yaml's JobStatus enum is %q; job.Statuses() is %q", described, defined)
	}
	for _, s := range job.Statuses() {
		got := jobDocument(job.Row{ID: "job_1", Task: "invoice.create", Status: s}).Status
		if !got.Valid() || string(got) != string(s) {
			t.Errorf("job status %q is shown as %q (valid %v)", s, got, got.Valid())
		}
	}
}

// An accepted job is one whose record is committed: when only its task
// could not be enqueued, the client gets the job (202, stored, replayed)
// and the failure is logged; when not even the record was written, the
// answer is 503 and the key is released.
func TestEnqueueFailures(t *testing.T) {
	t.Parallel()
	recorded := job.Row{ID: "job_1", Task: "invoice.create", Status: job.StatusQueued, Tenant: "acme", Queue: "default"}
	var submits atomic.Int32
	jobs := fakeJobs{submit: func(_ context.Context, req job.Request) (job.Row, error) {
		submits.Add(1)
		if req.Key == "no-record" {
			return job.Row{}, errors.New("enqueue: create job: connection refused")
		}
		return recorded, fmt.Errorf("%w: %w", job.ErrTaskDeferred, errors.New("enqueue: job_1: dial tcp: connection refused"))
	}}
	opts := testOptions(jobs)
	var logs bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	g := newTestGateway(t, opts)
	body := `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`
	post := func(key string) (*http.Response, string) {
		return serve(t, g.Handler(), http.MethodPost, "/v1/invoices", body,
			"Authorization", "Bearer "+testAPIKey, "Idempotency-Key", key, "Content-Type", "application/json")
	}

	resp, got := post("deferred")
	var doc openapi.Job
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") != "/v1/jobs/job_1" || json.Unmarshal([]byte(got), &doc) != nil || doc.Id != "job_1" {
		t.Fatalf("job recorded, task not enqueued: %d %s %s, want 202 with the job", resp.StatusCode, resp.Header.Get("Location"), got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "job_id=job_1") {
		t.Errorf("the deferred task is not logged as a warning naming the job:\n%s", logs.String())
	}
	resp, _ = post("deferred")
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" || submits.Load() != 1 {
		t.Fatalf("retry: %d replayed=%q after %d submits, want the stored 202", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), submits.Load())
	}

	resp, got = post("no-record")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(got, "queue-unavailable") {
		t.Fatalf("no record written: %d %s, want 503 queue-unavailable", resp.StatusCode, got)
	}
	if resp, _ = post("no-record"); resp.StatusCode != http.StatusServiceUnavailable || submits.Load() != 3 {
		t.Fatalf("the retry after a 503 must submit again (key released): %d after %d submits", resp.StatusCode, submits.Load())
	}
}
