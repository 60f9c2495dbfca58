package config

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// debounceJob is a job with HTTP delivery whose debounce is the flow
// mapping given, and the YAML lines extra.
func debounceJob(debounce, extra string) string {
	return `jobs:
  - task: crm.sync
    schema: {type: object, required: [account_id, rev], properties: {account_id: {type: string}, rev: {type: integer}}}
    business_key: "crm:{account_id}:{rev}"
    deliver: {http: {url: "https://crm.example/hooks", secret: "` + secret + `"}}
    debounce: ` + debounce + "\n" + extra
}

func TestDebounceValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, debounce string
		want           job.Debounce
	}{
		{
			name:     "trailing by default",
			debounce: `{key: "{tenant}:{account_id}", delay: 10s, max_delay: 2m}`,
			want:     job.Debounce{Delay: 10 * time.Second, MaxDelay: 2 * time.Minute, Mode: job.DebounceTrailing},
		},
		{
			name:     "leading, the bounds themselves",
			debounce: `{key: "{account_id}", delay: 1s, max_delay: 1s, mode: leading}`,
			want:     job.Debounce{Delay: time.Second, MaxDelay: time.Second, Mode: job.DebounceLeading},
		},
		{
			name:     "seven days",
			debounce: `{key: "{tenant}", delay: 168h, max_delay: 200h, mode: trailing}`,
			want:     job.Debounce{Delay: 168 * time.Hour, MaxDelay: 200 * time.Hour, Mode: job.DebounceTrailing},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(enqueueBase+debounceJob(tc.debounce, "")), "x.yaml", nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			spec, _ := cfg.Job("crm.sync")
			d := spec.Debounce
			if d == nil || d.Delay != tc.want.Delay || d.MaxDelay != tc.want.MaxDelay || d.Mode != tc.want.Mode {
				t.Fatalf("Debounce = %+v, want %+v", d, tc.want)
			}
			// The key renders {tenant} from the job's tenant.
			p, err := spec.Decode([]byte(`{"account_id": "a-1", "rev": 3}`))
			if err != nil {
				t.Fatal(err)
			}
			if v, err := d.Value("acme", p.Data); err != nil || !strings.Contains(d.Key.String(), "{tenant}") && strings.Contains(v, "acme") {
				t.Errorf("Value = %q, %v", v, err)
			}
		})
	}
}

func TestDebounceValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "nothing given",
			yaml: debounceJob(`{}`, ""),
			want: []string{
				`x.yaml:10: jobs[0].debounce.key: required: a template of what to fold submits by, like "{tenant}:{account_id}"`,
				"x.yaml:10: jobs[0].debounce.delay: required: how long after the latest submit the job runs, from 1s to 7d (168h)",
				"x.yaml:10: jobs[0].debounce.max_delay: required: the longest the first submit may be postponed, at least delay",
			},
		},
		{
			name: "every bound broken at once",
			yaml: debounceJob(`{key: "{tenant}:{plan}", delay: 500ms, max_delay: 100ms, mode: middle}`, ""),
			want: []string{
				`x.yaml:10: jobs[0].debounce.key: {plan} names a field the schema does not require: add it to the schema's "required" (or key on {tenant})`,
				"x.yaml:10: jobs[0].debounce.delay: 500ms is outside 1s to 7d (168h)",
				"x.yaml:10: jobs[0].debounce.max_delay: 100ms is below delay 500ms",
				`x.yaml:10: jobs[0].debounce.mode: "middle" is not trailing or leading`,
			},
		},
		{
			name: "a delay above seven days",
			yaml: debounceJob(`{key: "{tenant}", delay: 169h, max_delay: 200h}`, ""),
			want: []string{"x.yaml:10: jobs[0].debounce.delay: 169h0m0s is outside 1s to 7d (168h)"},
		},
		{
			name: "max_delay below delay",
			yaml: debounceJob(`{key: "{tenant}", delay: 10s, max_delay: 5s}`, ""),
			want: []string{"x.yaml:10: jobs[0].debounce.max_delay: 5s is below delay 10s"},
		},
		{
			name: "a key without a field",
			yaml: debounceJob(`{key: "all", delay: 10s, max_delay: 1m}`, ""),
			want: []string{`x.yaml:10: jobs[0].debounce.key: template "all" names no {field}: every job of the task would get the same identity`},
		},
		{
			name: "with the job's own delay",
			yaml: debounceJob(`{key: "{tenant}", delay: 10s, max_delay: 1m}`, "    delay: 5s\n"),
			want: []string{"x.yaml:10: jobs[0].debounce: replaces the job's delay: leave delay out"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantProblems(t, enqueueBase+tc.yaml, "x.yaml", tc.want)
		})
	}
}

func TestDebounceRefusesSchedules(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(enqueueBase+debounceJob(`{key: "{tenant}", delay: 10s, max_delay: 1m}`, "")), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := cfg.Job("crm.sync")
	if err := spec.CheckSchedule(job.ScheduleAfter(time.Minute), time.Now()); err == nil {
		t.Error("CheckSchedule accepted a request's own schedule for a debounced job")
	}
	if err := spec.CheckSchedule(job.Schedule{}, time.Now()); err != nil {
		t.Errorf("CheckSchedule refused no schedule: %v", err)
	}
}

// A debounced job may wait in a fairness pool: its spec keeps both.
func TestDebounceInFairnessPool(t *testing.T) {
	t.Parallel()
	yaml := enqueueBase + "fairness:\n  - {name: tenants, window: 4}\n" +
		debounceJob(`{key: "{tenant}:{account_id}", delay: 10s, max_delay: 1m}`, "    fairness: tenants\n    priority: 1\n")
	cfg, err := Parse([]byte(yaml), "x.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	spec, _ := cfg.Job("crm.sync")
	if spec.Debounce == nil || spec.Fairness != "tenants" || spec.Priority != 1 {
		t.Errorf("spec: debounce %+v, fairness %q, priority %d; want both, priority 1", spec.Debounce, spec.Fairness, spec.Priority)
	}
}
