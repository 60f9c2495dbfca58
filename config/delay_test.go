package config

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// A job's delay and max_delay reach its spec, max_delay defaulting to
// 720h; config check refuses negative ones and a delay above max_delay.
func TestJobDelays(t *testing.T) {
	t.Parallel()
	const head = enqueueBase + "jobs:\n"
	const job1 = `  - {task: a.run, schema: {type: object, required: [id]}, business_key: "a:{id}", deliver: {http: {url: "http://127.0.0.1:1/a", secret: ` + secret + `}}`
	cfg, err := Parse([]byte(head+job1+", delay: 90s, max_delay: 48h}\n"+
		strings.Replace(job1, "a.run", "b.run", 1)+"}\n"), "d.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if a, _ := cfg.Job("a.run"); a.Delay != 90*time.Second || a.MaxDelay != 48*time.Hour {
		t.Errorf("a.run: delay %s, max_delay %s; want 90s and 48h", a.Delay, a.MaxDelay)
	}
	if b, _ := cfg.Job("b.run"); b.Delay != 0 || b.MaxDelay != job.DefaultMaxDelay {
		t.Errorf("b.run: delay %s, max_delay %s; want 0 and 720h", b.Delay, b.MaxDelay)
	}
	for _, tc := range []struct{ keys, want string }{
		{"delay: -1s", "d.yaml:6: jobs[0].delay: must not be negative, not -1s"},
		{"max_delay: -1s", "d.yaml:6: jobs[0].max_delay: must be positive, not -1s"},
		{"max_delay: 0s", "d.yaml:6: jobs[0].max_delay: must be positive, not 0s"},
		{"delay: 2h, max_delay: 1h", "d.yaml:6: jobs[0].delay: 2h0m0s is above max_delay 1h0m0s"},
		{"delay: 721h", "d.yaml:6: jobs[0].delay: 721h0m0s is above max_delay 720h0m0s"},
		{"delay: soon", "jobs[0].delay"},
	} {
		_, err := Parse([]byte(head+job1+", "+tc.keys+"}\n"), "d.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.keys, err, tc.want)
		}
	}
}
