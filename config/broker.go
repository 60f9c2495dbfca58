package config

import (
	"maps"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
)

// Broker configures how jobs' tasks are laid out in asynq's Redis.
type Broker struct {
	// Shards spreads each queue over this many asynq queues, chosen by
	// the job's tenant, so that on a Redis Cluster a queue's tasks are
	// spread over the nodes instead of held by the one owning its hash
	// slot (job.ShardQueue). Workers consume every shard. From 1 to
	// MaxShards. Default 1: one asynq queue per queue. Changing it moves
	// new jobs to other queues: let the old ones drain first.
	Shards int `yaml:"shards"`
}

// MaxShards bounds broker.shards.
const MaxShards = 256

func (c *Config) validateBroker(bad badFunc) {
	if c.Broker.Shards < 0 || c.Broker.Shards > MaxShards {
		bad("broker.shards", "must be from 1 to %d, not %d", MaxShards, c.Broker.Shards)
	}
}

// Shards is broker.shards, at least 1.
func (c *Config) Shards() int { return max(c.Broker.Shards, 1) }

// WorkerConfig is worker's asynq configuration with each queue spread
// over its broker shards, each shard at the queue's priority.
func (c *Config) WorkerConfig() workers.Config {
	wc := c.Worker.Config
	if c.Shards() == 1 {
		return wc
	}
	queues := maps.Clone(wc.Queues)
	wc.Queues = map[string]int{}
	for q, p := range queues {
		for _, s := range job.ShardQueues(q, c.Shards()) {
			wc.Queues[s] = p
		}
	}
	return wc
}
