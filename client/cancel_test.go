package client

import (
	"errors"
	"testing"

	"github.com/idemgate/idemgate/openapi"
)

func TestCancelJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		answers []reply
		status  openapi.JobStatus
		check   func(error) bool
	}{
		{"cancelled", []reply{jobReply(200, "cancelled", "")}, openapi.JobStatusCancelled, nil},
		{"cancelling", []reply{jobReply(202, "cancelling", "")}, openapi.JobStatusCancelling, nil},
		{"retried until answered", []reply{{status: 503}, jobReply(200, "cancelled", "")}, openapi.JobStatusCancelled, nil},
		{"too late", []reply{problemReply(409, "job-not-cancellable", "the job has succeeded", nil)}, "", IsNotCancellable},
		{"unknown", []reply{problemReply(404, "not-found", "no such job", nil)}, "", func(err error) bool {
			var p *ProblemError
			return errors.As(err, &p) && p.Status == 404 && !IsNotCancellable(err)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, tc.answers...)
			j, err := testClient(g, newClock()).CancelJob(t.Context(), "job_1")
			switch {
			case tc.check != nil:
				if !tc.check(err) || j.Id != "" {
					t.Fatalf("CancelJob: %+v, %v", j, err)
				}
			case err != nil || j.Status != tc.status:
				t.Fatalf("CancelJob: %+v, %v; want %s", j, err, tc.status)
			}
			for _, r := range g.requests() {
				if r.method != "POST" || r.path != "/v1/jobs/job_1/cancel" || len(r.body) != 0 {
					t.Errorf("request %s %s body %q", r.method, r.path, r.body)
				}
			}
		})
	}
}

// WaitJob ends on a cancelled job, as on any final status.
func TestWaitJobEndsOnCancelled(t *testing.T) {
	t.Parallel()
	g := newGateway(t, jobReply(200, "cancelling", ""), jobReply(200, "cancelled", ""))
	j, err := testClient(g, newClock()).WaitJob(t.Context(), "job_1")
	if err != nil || j.Status != openapi.JobStatusCancelled || len(g.requests()) != 2 {
		t.Fatalf("WaitJob: %+v, %v after %d polls; want the cancelled document after 2", j, err, len(g.requests()))
	}
}
