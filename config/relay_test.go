package config

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// The relay's keys: defaults when absent, the values given, and every
// value that cannot be a grace period or an interval refused, each named.
func TestRelayKeys(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal), "r.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Worker.RelayOptions(); got.After != job.DefaultRequeueAfter || got.Interval != job.DefaultRequeueInterval {
		t.Errorf("defaults: requeue_after %s, requeue_interval %s; want the relay's, %s and %s", got.After, got.Interval, job.DefaultRequeueAfter, job.DefaultRequeueInterval)
	}
	if d := (Worker{}).RelayOptions(); d.After != 0 || d.Interval != 0 {
		t.Errorf("a Worker not from a file passes %+v, want zeros for the relay's own defaults", d)
	}

	cfg, err = Parse([]byte(minimal+"worker: {requeue_after: 30s, requeue_interval: 2s, lock_ttl: 5s}\n"), "r.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Worker.RelayOptions(); got.After != 30*time.Second || got.Interval != 2*time.Second || got.LockTTL != 5*time.Second {
		t.Errorf("set: %+v, want 30s and 2s, and the takeover following lock_ttl 5s", got)
	}

	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "zero and negative",
			yaml: "worker:\n  requeue_after: 0s\n  requeue_interval: -5s\n",
			want: []string{
				"r.yaml:5: worker.requeue_after: must be positive, not 0s",
				"r.yaml:6: worker.requeue_interval: must be positive, not -5s",
			},
		},
		{
			name: "not durations",
			yaml: "worker:\n  requeue_after: 60\n  requeue_interval: often\n",
			want: []string{
				`r.yaml:5: worker.requeue_after: "60" is not a duration (use 60s)`,
				`r.yaml:6: worker.requeue_interval: "often" is not a duration (use a Go duration such as 30s, 5m or 1h30m)`,
			},
		},
		{
			name: "with the other worker problems",
			yaml: "worker: {concurrency: -1, requeue_after: -1m}\n",
			want: []string{
				"r.yaml:4: worker.concurrency: must be positive, not -1",
				"r.yaml:4: worker.requeue_after: must be positive, not -1m0s",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantProblems(t, minimal+tc.yaml, "r.yaml", tc.want)
		})
	}
}
