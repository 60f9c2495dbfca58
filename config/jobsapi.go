package config

import (
	"time"

	"github.com/idemgate/idemgate/job"
)

// JobsAPI configures the gateway's job endpoints (GET /v1/jobs/{id}) and
// how enqueue routes accept jobs.
type JobsAPI struct {
	// MaxWait caps GET /v1/jobs/{id}?wait=: a longer wait is clamped to
	// it. Shorter than server.write_timeout, which would cut the answer.
	// Default gateway.DefaultMaxWait, 30s.
	MaxWait time.Duration `yaml:"max_wait"`
	// MaxWaiters bounds the GET /v1/jobs/{id}?wait= one gateway holds at
	// once, and MaxWaitersPerTenant those of one tenant. A wait beyond
	// either is answered at once with the job as it stands and the
	// header Idemgate-Wait-Refused. Held waits do not count against
	// server.max_in_flight. Defaults gateway.DefaultMaxWaiters, 1024, and
	// gateway.DefaultMaxWaitersPerTenant, 16.
	MaxWaiters          int `yaml:"max_waiters"`
	MaxWaitersPerTenant int `yaml:"max_waiters_per_tenant"`
	// MaxDepth bounds how deep an enqueue route's body may nest its
	// arrays and objects ([[1]] is two deep). A deeper body is refused
	// with 422 invalid-payload before anything is recorded. At most
	// 10000, the nesting every JSON reader takes. Default
	// job.DefaultMaxDepth, 64.
	MaxDepth int `yaml:"max_depth"`
	// RedisWait holds an enqueue route's 202 until the job's task is on
	// this many replicas of the queue's Redis, or the timeout has passed:
	// a failover then does not lose the task, which the relay would
	// otherwise enqueue again only on its next pass. The jobs row is the
	// truth either way, so a wait that falls short still answers 202.
	// Default off.
	RedisWait RedisWait `yaml:"redis_wait"`
	// Batch configures the enqueue routes' batch paths (routes[].batch).
	Batch JobsBatch `yaml:"batch"`
	// Schedules bounds the schedules of PUT /v1/schedules/{id}.
	Schedules JobsSchedules `yaml:"schedules"`
}

// defaultMaxWait, defaultMaxWaiters and defaultMaxWaitersPerTenant are
// the gateway's DefaultMaxWait, DefaultMaxWaiters and
// DefaultMaxWaitersPerTenant; config does not import the gateway.
const (
	defaultMaxWait             = 30 * time.Second
	defaultMaxWaiters          = 1024
	defaultMaxWaitersPerTenant = 16
)

// maxJSONDepth is the deepest nesting encoding/json, and so ijson, reads.
const maxJSONDepth = 10000

func (c *Config) jobsAPIDefaults() {
	setDefault(&c.JobsAPI.MaxWait, defaultMaxWait)
	setDefault(&c.JobsAPI.MaxWaiters, defaultMaxWaiters)
	setDefault(&c.JobsAPI.MaxWaitersPerTenant, defaultMaxWaitersPerTenant)
	setDefault(&c.JobsAPI.MaxDepth, job.DefaultMaxDepth)
	c.scheduleDefaults()
}

func (c *Config) validateJobsAPI(bad badFunc) {
	switch w := c.JobsAPI.MaxWait; {
	case w < 0:
		bad("jobs_api.max_wait", "must be positive, not %v", w)
	case c.Server.WriteTimeout > 0 && w >= c.Server.WriteTimeout:
		bad("jobs_api.max_wait", "%v must be shorter than server.write_timeout (%v), which would cut a waiting GET /v1/jobs/{id} before it answers",
			w, c.Server.WriteTimeout)
	}
	nonNegative(bad, "jobs_api.max_waiters", c.JobsAPI.MaxWaiters)
	nonNegative(bad, "jobs_api.max_waiters_per_tenant", c.JobsAPI.MaxWaitersPerTenant)
	if d := c.JobsAPI.MaxDepth; d < 1 || d > maxJSONDepth {
		bad("jobs_api.max_depth", "%d is outside 1..%d", d, maxJSONDepth)
	}
}
