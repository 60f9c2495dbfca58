package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
)

// Debounce is jobs[].debounce: the submits of the job under one debounce
// key, within a tenant, fold into one pending job that runs once they
// pause for Delay, or at the latest MaxDelay after the first.
type Debounce struct {
	// Key is the template of the debounce key: {tenant} is the job's
	// tenant, any other {field} a field the job's schema requires
	// ("{tenant}:{account_id}"). Required.
	Key string `yaml:"key"`
	// Delay is how long after the latest submit the job runs, from 1s to
	// 7d. Required.
	Delay time.Duration `yaml:"delay"`
	// MaxDelay is the longest the first submit's job may be postponed,
	// at least Delay. Required.
	MaxDelay time.Duration `yaml:"max_delay"`
	// Mode is trailing (the latest body wins) or leading (the first body
	// stays; later submits only postpone the job). Default trailing.
	Mode string `yaml:"mode"`
}

// jobDebounce checks a job's debounce: and returns its compiled form, or
// nil when the job has none or it has a problem. Every problem is
// reported.
func jobDebounce(j *Job, schema *job.Schema, at string, bad badFunc) *job.Debounce {
	d := j.Debounce
	if d == nil {
		return nil
	}
	at += ".debounce"
	failed := false
	fail := func(key, format string, args ...any) {
		failed = true
		bad(key, format, args...)
	}
	out := &job.Debounce{Delay: d.Delay, MaxDelay: d.MaxDelay, Mode: job.DebounceMode(d.Mode)}
	if out.Mode == "" {
		out.Mode = job.DebounceTrailing
	}
	switch d.Key {
	case "":
		fail(at+".key", `required: a template of what to fold submits by, like "{tenant}:{account_id}"`)
	default:
		t, err := job.ParseTemplate(d.Key)
		if err != nil {
			fail(at+".key", "%v", err)
			break
		}
		out.Key = t
		if schema != nil {
			for _, f := range t.Fields() {
				if f != "tenant" && !schema.Requires(f) {
					fail(at+".key", `{%s} names a field the schema does not require: add it to the schema's "required" (or key on {tenant})`, f)
				}
			}
		}
	}
	if err := out.Check(); err != nil {
		// One problem a line, each led by its key.
		for _, line := range strings.Split(err.Error(), "\n") {
			key, msg, _ := strings.Cut(line, ": ")
			fail(at+"."+key, "%s", msg)
		}
	}
	if j.Delay != 0 {
		fail(at, "replaces the job's delay: leave delay out")
	}
	if failed {
		return nil
	}
	return out
}

// debouncedTask reports whether the declared job of task is debounced.
func (c *Config) debouncedTask(task string) bool {
	for _, j := range c.DeclaredJobs {
		if j.Task == task {
			return j.Debounce != nil
		}
	}
	return false
}

// debounceBatchProblem is what is wrong with a batch path on a route of
// task, or "".
func (c *Config) debounceBatchProblem(task string) string {
	if c.debouncedTask(task) {
		return fmt.Sprintf("%s is debounced: its submits fold one by one, so it has no batch path", task)
	}
	return ""
}
