package config

import "time"

// JobsAPI configures the gateway's job endpoints (GET /v1/jobs/{id}).
type JobsAPI struct {
	// MaxWait caps GET /v1/jobs/{id}?wait=: a longer wait is clamped to
	// it. Shorter than server.write_timeout, which would cut the answer.
	// Default gateway.DefaultMaxWait, 30s.
	MaxWait time.Duration `yaml:"max_wait"`
}

// defaultMaxWait is gateway.DefaultMaxWait; config does not import the
// gateway.
const defaultMaxWait = 30 * time.Second

func (c *Config) jobsAPIDefaults() {
	setDefault(&c.JobsAPI.MaxWait, defaultMaxWait)
}

func (c *Config) validateJobsAPI(bad badFunc) {
	switch w := c.JobsAPI.MaxWait; {
	case w < 0:
		bad("jobs_api.max_wait", "must be positive, not %v", w)
	case c.Server.WriteTimeout > 0 && w >= c.Server.WriteTimeout:
		bad("jobs_api.max_wait", "%v must be shorter than server.write_timeout (%v), which would cut a waiting GET /v1/jobs/{id} before it answers",
			w, c.Server.WriteTimeout)
	}
}
