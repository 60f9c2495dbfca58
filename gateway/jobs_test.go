package gateway

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/idemgate/idemgate/enqueue"
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
		got := jobDocument(enqueue.Job{ID: "job_1", Task: "invoice.create", Status: s}).Status
		if !got.Valid() || string(got) != string(s) {
			t.Errorf("job status %q is shown as %q (valid %v)", s, got, got.Valid())
		}
	}
}
