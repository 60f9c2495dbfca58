package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
)

// Limit is one entry of limits: a flow limit jobs share by name, counted
// per key value (each job's use says which), across every worker.
type Limit struct {
	// Name is how jobs[].limits[].use refers to it: required, unique,
	// [a-z0-9_.:-]+. It labels the limit's metrics and names its admin
	// endpoint (/admin/limits/{name}).
	Name string `yaml:"name"`
	// Concurrency is how many attempts may run at once per key value, at
	// least 1. Default none: no concurrency limit.
	Concurrency *int `yaml:"concurrency"`
	// Rate is how many attempts may start per period per key value, as
	// "N/duration": "20/1s", "100/1m". Default none: no rate limit. At
	// least one of concurrency and rate. Starts are paced as N per period
	// and 50ms, so a receiver counting per period sees at most N.
	Rate string `yaml:"rate"`
	// Burst is how many starts may come at once above the even pace of
	// one every period/N, at least 1; it needs a rate. Default
	// job.DefaultBurst, 1: evenly spaced.
	Burst *int `yaml:"burst"`
	// PauseAfter is the limit's breaker: a key value whose attempts fail
	// consecutive_failures times in a row within `within` is paused for
	// `for`, then resumes by itself. Default none.
	PauseAfter *PauseAfter `yaml:"pause_after"`
}

// PauseAfter is limits[].pause_after.
type PauseAfter struct {
	// ConsecutiveFailures is how many failed attempts in a row open the
	// breaker, at least 1. Required.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// Within is the window the failures must fall in, counted from the
	// first. Required, at least 1s.
	Within time.Duration `yaml:"within"`
	// For is how long the key value stays paused. Required, at least 1s.
	For time.Duration `yaml:"for"`
}

// LimitUse is one entry of jobs[].limits: a declared limit the job takes
// before each attempt.
type LimitUse struct {
	// Use is the name of a limit under limits. Required.
	Use string `yaml:"use"`
	// Key is the template of the key value the limit is counted per:
	// {tenant} is the job's tenant, any other {field} a field the job's
	// schema requires ("{tenant}", "account:{account_id}"). Default none:
	// one budget for every job that uses the limit.
	Key string `yaml:"key"`
}

// validateLimits checks limits: and compiles them for the jobs' uses.
func (c *Config) validateLimits(bad badFunc) {
	c.limits = map[string]job.FlowLimit{}
	names := map[string]int{}
	for i, l := range c.Limits {
		at := fmt.Sprintf("limits[%d]", i)
		ok := true
		fail := func(key, format string, args ...any) {
			ok = false
			bad(key, format, args...)
		}
		switch {
		case l.Name == "":
			fail(at+".name", "required: the name jobs use it by, like ship-api")
		case !validTask(l.Name):
			fail(at+".name", "%q may only contain a-z, 0-9, '_', '.', ':' and '-'", l.Name)
		default:
			if _, dup := names[l.Name]; dup {
				ok = false
			}
			distinct(bad, names, "limits", i, "name", l.Name)
		}
		def := job.FlowLimit{Name: l.Name}
		if l.Concurrency != nil {
			if *l.Concurrency < 1 {
				fail(at+".concurrency", "must be at least 1, not %d (leave it out for no concurrency limit)", *l.Concurrency)
			}
			def.Concurrency = *l.Concurrency
		}
		if l.Rate != "" {
			n, per, err := job.ParseRate(l.Rate)
			if err != nil {
				fail(at+".rate", "%v", err)
			}
			def.Rate, def.Period = n, per
		}
		switch {
		case l.Burst == nil:
			if l.Rate != "" {
				def.Burst = job.DefaultBurst
			}
		case l.Rate == "":
			fail(at+".burst", "needs a rate: a burst is how many starts may come at once above the rate's pace")
		case *l.Burst < 1:
			fail(at+".burst", "must be at least 1, not %d", *l.Burst)
		default:
			def.Burst = *l.Burst
		}
		if pa := l.PauseAfter; pa != nil {
			if pa.ConsecutiveFailures < 1 {
				fail(at+".pause_after.consecutive_failures", "must be at least 1, not %d", pa.ConsecutiveFailures)
			}
			if pa.Within < time.Second {
				fail(at+".pause_after.within", "must be at least 1s, not %s", pa.Within)
			}
			if pa.For < time.Second {
				fail(at+".pause_after.for", "must be at least 1s, not %s", pa.For)
			}
			def.PauseAfter = &job.Breaker{Failures: pa.ConsecutiveFailures, Within: pa.Within, For: pa.For}
		}
		if l.Concurrency == nil && l.Rate == "" {
			fail(at, "needs concurrency, rate or both: a limit without either limits nothing")
		}
		if ok {
			c.limits[l.Name] = def
		}
	}
}

// jobLimits checks a job's limits: and returns their compiled form. Each
// field a key names must be required by the job's schema, so every valid
// payload forms a key value.
func (c *Config) jobLimits(j *Job, schema *job.Schema, at string, bad badFunc) []job.FlowLimitUse {
	var out []job.FlowLimitUse
	used := map[string]int{}
	for i, u := range j.Limits {
		key := fmt.Sprintf("%s.limits[%d]", at, i)
		if u.Use == "" {
			bad(key+".use", "required: the name of a limit declared under limits")
			continue
		}
		def, declared := c.limits[u.Use]
		// A limit with problems of its own is reported there; its use's
		// key is still checked.
		broken := !declared && slices.ContainsFunc(c.Limits, func(l Limit) bool { return l.Name == u.Use })
		if !declared && !broken {
			bad(key+".use", "%s", c.unknownLimit(u.Use))
			continue
		}
		if first, dup := used[u.Use]; dup {
			bad(key+".use", "%q is also used by %s.limits[%d]: a job takes each limit once", u.Use, at, first)
			continue
		}
		used[u.Use] = i
		use := job.FlowLimitUse{Limit: def}
		switch {
		case u.Key == "":
		case !strings.ContainsAny(u.Key, "{}"):
			bad(key+".key", "%q names no {field}: leave key out for one budget shared by every job that uses %s", u.Key, u.Use)
			continue
		default:
			t, err := job.ParseTemplate(u.Key)
			if err != nil {
				bad(key+".key", "%v", err)
				continue
			}
			use.Key = t
			if schema != nil {
				var missing bool
				for _, f := range use.KeyFields() {
					if !schema.Requires(f) {
						missing = true
						bad(key+".key", `{%s} names a field the schema does not require: add it to the schema's "required" (or key on {tenant})`, f)
					}
				}
				if missing {
					continue
				}
			}
		}
		if !broken {
			out = append(out, use)
		}
	}
	return out
}

// unknownLimit says that name is not a declared limit, naming those that
// are.
func (c *Config) unknownLimit(name string) string {
	var known []string
	for _, l := range c.Limits {
		if l.Name != "" {
			known = append(known, l.Name)
		}
	}
	if len(known) == 0 {
		return fmt.Sprintf("%q is not a declared limit; declare it under limits", name)
	}
	return fmt.Sprintf("%q is not a declared limit (declared: %s)", name, strings.Join(known, ", "))
}

// Limit returns the compiled limit called name, as jobs use it.
func (c *Config) Limit(name string) (job.FlowLimit, bool) {
	l, ok := c.limits[name]
	return l, ok
}

// LimitDefs returns the compiled limits in declaration order.
func (c *Config) LimitDefs() []job.FlowLimit {
	var out []job.FlowLimit
	for _, l := range c.Limits {
		if def, ok := c.limits[l.Name]; ok && !slices.ContainsFunc(out, func(d job.FlowLimit) bool { return d.Name == l.Name }) {
			out = append(out, def)
		}
	}
	return out
}
