package config

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/job"
)

func TestBrokerShards(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(enqueueBase+"broker: {shards: 3}\nworker: {queues: {default: 2, bulk: 1}}\n"), "x.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	got := cfg.WorkerConfig().Queues
	want := map[string]int{}
	for _, q := range job.ShardQueues("default", 3) {
		want[q] = 2
	}
	for _, q := range job.ShardQueues("bulk", 3) {
		want[q] = 1
	}
	if !maps.Equal(got, want) {
		t.Errorf("worker queues with 3 shards: %v, want %v", got, want)
	}

	cfg, err = Parse([]byte(enqueueBase), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Shards() != 1 || !maps.Equal(cfg.WorkerConfig().Queues, cfg.Worker.Queues) {
		t.Errorf("default: %d shards, queues %v", cfg.Shards(), cfg.WorkerConfig().Queues)
	}

	_, err = Parse([]byte(enqueueBase+"broker: {shards: 300}\n"), "x.yaml", nil)
	if want := "x.yaml:5: broker.shards: must be from 1 to 256, not 300"; err == nil || !slices.Contains(strings.Split(err.Error(), "\n"), want) {
		t.Errorf("shards 300: %v; want %q", err, want)
	}
}
