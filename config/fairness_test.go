package config

import (
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/job"
)

// fairJob is a job with HTTP delivery and the YAML lines extra.
func fairJob(extra string) string {
	return `jobs:
  - task: shipment.book
    schema: {type: object, required: [id], properties: {id: {type: string}}}
    business_key: "ship:{id}"
    deliver: {http: {url: "https://ship.example/hooks", secret: "` + secret + `"}}
` + extra
}

func TestFairnessValid(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(enqueueBase+`fairness:
  - {name: tenants, default_weight: 1, weights: {acme: 3, bigco: 0.5}, window: 32}
  - {name: imports}
`+fairJob("    fairness: tenants\n    priority: 2\n")), "x.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []job.FairPool{
		{Name: "tenants", DefaultWeight: 1, Weights: map[string]float64{"acme": 3, "bigco": 0.5}, Window: 32},
		{Name: "imports", DefaultWeight: 1, Window: job.DefaultFairWindow},
	}
	if got := cfg.FairPools(); !reflect.DeepEqual(got, want) {
		t.Errorf("FairPools = %+v, want %+v", got, want)
	}
	spec, ok := cfg.Job("shipment.book")
	if !ok || spec.Fairness != "tenants" || spec.Priority != 2 {
		t.Errorf("spec: %+v", spec)
	}
}

func TestFairnessValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "an unknown pool",
			yaml: "fairness:\n  - {name: tenants}\n" + fairJob("    fairness: imports\n"),
			want: []string{`x.yaml:12: jobs[0].fairness: "imports" is not a declared fairness pool (declared: tenants)`},
		},
		{
			name: "no pools declared",
			yaml: fairJob("    fairness: tenants\n"),
			want: []string{`x.yaml:10: jobs[0].fairness: "tenants" is not a declared fairness pool; declare it under fairness`},
		},
		{
			name: "a priority without a pool",
			yaml: fairJob("    priority: 1\n"),
			want: []string{`x.yaml:10: jobs[0].priority: orders the job within its fairness pool; it needs fairness`},
		},
		{
			name: "bad weights and windows, a pool twice, one without a name",
			yaml: `fairness:
  - {name: a, default_weight: 0}
  - {name: b, weights: {acme: -1}, window: 0}
  - {name: a}
  - {window: 3}
`,
			want: []string{
				"x.yaml:6: fairness[0].default_weight: must be a positive number, not 0",
				"x.yaml:7: fairness[1].weights.acme: must be a positive number, not -1",
				"x.yaml:7: fairness[1].window: must be at least 1, not 0",
				`x.yaml:8: fairness[2].name: "a" is also the name of fairness[0]`,
				"x.yaml:9: fairness[3].name: required: the name jobs use it by, like tenants",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantProblems(t, enqueueBase+tc.yaml, "x.yaml", tc.want)
		})
	}
}
