package examples

import (
	"bytes"
	"os"
	"testing"

	"github.com/idemgate/idemgate/job"
)

// TestJobsYAMLMatchesSchemaFiles: JobsYAML (the declarations a
// configuration without jobs: falls back to) inlines the schemas that
// deploy/local/idemgate.yaml reads from schemas/*.json. They must not
// drift apart.
func TestJobsYAMLMatchesSchemaFiles(t *testing.T) {
	specs := declaredJobs(t)
	if len(specs) != len(Tasks()) {
		t.Fatalf("JobsYAML declares %d jobs, the package has %d tasks", len(specs), len(Tasks()))
	}
	for _, spec := range specs {
		file, err := os.ReadFile("schemas/" + spec.Task + ".json")
		if err != nil {
			t.Fatal(err)
		}
		want, err := job.Canonical(file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := job.Canonical(spec.Schema.JSON())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the schema in jobs.yaml\n%s\ndiffers from schemas/%s.json\n%s", spec.Task, got, spec.Task, want)
		}
	}
}
