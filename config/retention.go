package config

import (
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

func (c *Config) retentionDefaults() {
	setDefault(&c.JobsRetention, job.DefaultRetention)
	if c.ExecutionsRetention == nil {
		c.ExecutionsRetention = new(execution.DefaultRetention)
	}
}

func (c *Config) validateRetention(bad badFunc) {
	positive(bad, "jobs_retention", c.JobsRetention)
	if c.ExecutionsRetention == nil {
		return
	}
	switch e := *c.ExecutionsRetention; {
	case e < 0:
		bad("executions_retention", "must be positive, or 0 to keep executions forever, not %v", e)
	case e > 0 && e < c.JobsRetention:
		bad("executions_retention", "%v is shorter than jobs_retention (%v): a job's business key would be forgotten while the job is still kept, and a duplicate would run again; set it to at least %v, or 0 to keep executions forever",
			e, c.JobsRetention, c.JobsRetention)
	}
}
