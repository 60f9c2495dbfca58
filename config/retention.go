package config

import (
	"fmt"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

// KeepExecutionsForever is executions_retention's special value as the
// file writes it: any negative duration keeps final executions forever.
const KeepExecutionsForever = "-1s"

// retentionDefaults gives both retentions their defaults. A retention
// written 0 takes its default, as every key's 0 does; before, an
// executions_retention of 0 kept executions forever, and such a file is
// warned about (retentionWarnings).
func (c *Config) retentionDefaults() {
	setDefault(&c.JobsRetention, job.DefaultRetention)
	switch {
	case c.ExecutionsRetention == nil:
		c.ExecutionsRetention = new(execution.DefaultRetention)
	case *c.ExecutionsRetention == 0:
		c.executionsZero = true
		c.ExecutionsRetention = new(execution.DefaultRetention)
	}
}

func (c *Config) validateRetention(bad badFunc) {
	positive(bad, "jobs_retention", c.JobsRetention)
	if c.ExecutionsRetention == nil {
		return
	}
	if e := *c.ExecutionsRetention; e > 0 && e < c.JobsRetention {
		bad("executions_retention", "%v is shorter than jobs_retention (%v): a job's business key would be forgotten while the job is still kept, and a duplicate would run again; set it to at least %v, or %s to keep executions forever",
			e, c.JobsRetention, c.JobsRetention, KeepExecutionsForever)
	}
}

// retentionWarnings names a retention whose meaning changed: an
// executions_retention written 0 once kept executions forever and now
// takes the default.
func (c *Config) retentionWarnings() []string {
	if !c.executionsZero {
		return nil
	}
	return []string{fmt.Sprintf("executions_retention: 0s now means the default, %v (%d days), as 0 does for every key; write %s to keep executions forever, as 0s did before",
		execution.DefaultRetention, int(execution.DefaultRetention.Hours()/24), KeepExecutionsForever)}
}
