package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

// TestOnFinal: on_final.http compiles into the spec with its defaults, and
// its url and secret are checked as deliver.http's are, without echoing a
// credential.
func TestOnFinal(t *testing.T) {
	t.Parallel()
	const decl = "jobs:\n  - task: a\n    schema: {type: object, required: [id]}\n    business_key: \"k:{id}\"\n    deliver: {http: {url: \"http://r/\", secret: " + secret + "}}\n"
	cfg, err := Parse([]byte(enqueueBase+decl+"    on_final: {http: {url: \"https://hooks.example/final\", secret: "+secret+"}}\n"), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := cfg.Job("a")
	if spec.OnFinal == nil || spec.OnFinal.HTTP.URL != "https://hooks.example/final" || len(spec.OnFinal.HTTP.Secrets) != 1 ||
		spec.OnFinal.HTTP.Timeout != job.DefaultTimeout || spec.OnFinal.MaxAttempts != job.DefaultCallbackMaxAttempts {
		t.Fatalf("on_final = %+v, want the url, one secret, the default timeout and %d attempts", spec.OnFinal, job.DefaultCallbackMaxAttempts)
	}
	cfg, err = Parse([]byte(enqueueBase+decl), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec, _ := cfg.Job("a"); spec.OnFinal != nil {
		t.Fatalf("without on_final: %+v, want none", spec.OnFinal)
	}

	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "no http",
			yaml: "    on_final: {}\n",
			want: []string{"x.yaml:10: jobs[0].on_final: needs http: the url and secret of the receiver of the final-status events"},
		},
		{
			name: "url, secret, timeout, headers and attempts",
			yaml: "    on_final: {http: {url: \"ftp://hunter2@h/\", secret: \"whsec_aHVudGVyMg==\", timeout: -1s, max_attempts: -1, headers: {webhook-id: x}}}\n",
			want: []string{
				"x.yaml:10: jobs[0].on_final.http.url: must be an absolute http:// or https:// URL with a host",
				"x.yaml:10: jobs[0].on_final.http.secret: the secret decodes to 7 bytes; use at least 16 random bytes",
				"x.yaml:10: jobs[0].on_final.http.timeout: must be positive, not -1s",
				"x.yaml:10: jobs[0].on_final.http.headers.webhook-id: webhook-id is set by every delivery; a static header cannot replace it",
				"x.yaml:10: jobs[0].on_final.http.max_attempts: must be at least 1, not -1",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(enqueueBase+decl+tc.yaml), filepath.Join("dir", "x.yaml"), nil)
			if err == nil {
				t.Fatal("Parse accepted the configuration")
			}
			got := strings.Split(strings.ReplaceAll(err.Error(), filepath.Join("dir", "x.yaml"), "x.yaml"), "\n")
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "aHVudGVyMg") {
				t.Errorf("a problem shows a credential:\n%s", err)
			}
		})
	}
}

// TestRetention: the defaults, a retention written 0 taking its default
// (executions_retention's 0 once kept executions forever: warned), -1s
// keeping executions forever, and the refusal of executions kept shorter
// than jobs.
func TestRetention(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobsRetention != job.DefaultRetention || cfg.ExecutionsRetention == nil || *cfg.ExecutionsRetention != execution.DefaultRetention {
		t.Fatalf("defaults: jobs %v, executions %v; want %v and %v", cfg.JobsRetention, cfg.ExecutionsRetention, job.DefaultRetention, execution.DefaultRetention)
	}
	if job.DefaultRetention != 720*time.Hour || execution.DefaultRetention != 2160*time.Hour {
		t.Fatalf("the documented defaults are 720h and 2160h, not %v and %v", job.DefaultRetention, execution.DefaultRetention)
	}
	if w := cfg.Warnings(); slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "retention") }) {
		t.Fatalf("a file without retentions warns %q", w)
	}
	cfg, err = Parse([]byte(minimal+"jobs_retention: 0s\nexecutions_retention: 0s\n"), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobsRetention != job.DefaultRetention || *cfg.ExecutionsRetention != execution.DefaultRetention {
		t.Fatalf("written 0: jobs %v, executions %v; want the defaults %v and %v", cfg.JobsRetention, *cfg.ExecutionsRetention, job.DefaultRetention, execution.DefaultRetention)
	}
	want := "executions_retention: 0s now means the default, 2160h0m0s (90 days), as 0 does for every key; write -1s to keep executions forever, as 0s did before"
	if w := cfg.Warnings(); !slices.Contains(w, want) {
		t.Fatalf("warnings %q, want %q", w, want)
	}
	cfg, err = Parse([]byte(minimal+"jobs_retention: 48h\nexecutions_retention: -1s\n"), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobsRetention != 48*time.Hour || *cfg.ExecutionsRetention >= 0 {
		t.Fatalf("jobs %v, executions %v; want 48h and negative (forever)", cfg.JobsRetention, *cfg.ExecutionsRetention)
	}
	if w := cfg.Warnings(); slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "retention") }) {
		t.Fatalf("-1s warns %q", w)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"jobs_retention: 720h\nexecutions_retention: 24h\n", "x.yaml:5: executions_retention: 24h0m0s is shorter than jobs_retention (720h0m0s)"},
		{"executions_retention: 24h\n", "x.yaml:4: executions_retention: 24h0m0s is shorter than jobs_retention (720h0m0s)"},
		{"jobs_retention: -1h\n", "x.yaml:4: jobs_retention: must be positive, not -1h0m0s"},
	} {
		_, err := Parse([]byte(minimal+tc.yaml), "x.yaml", nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q…", tc.yaml, err, tc.want)
		}
	}
}
