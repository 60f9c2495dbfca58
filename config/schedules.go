package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/yamljson"
	"github.com/idemgate/idemgate/job"
)

// Schedule is one entry of schedules: a declared job submitted for a
// tenant at each slot of a cron expression or an interval. The worker
// writes the declared schedules to the database at each start; one no
// longer declared is deleted there.
type Schedule struct {
	// ID names the schedule within its tenant: required,
	// [a-z0-9_.:-]+, unique per tenant.
	ID string `yaml:"id"`
	// Tenant the fires are submitted for. Required.
	Tenant string `yaml:"tenant"`
	// Task is the declared job (jobs[].task) each fire becomes. Required.
	Task string `yaml:"task"`
	// Cron is a standard five-field cron expression (minute hour
	// day-of-month month day-of-week) read in Timezone. Exactly one of
	// Cron and Every.
	Cron string `yaml:"cron"`
	// Every is a fixed interval, whole seconds; its slots are its
	// multiples since the Unix epoch.
	Every time.Duration `yaml:"every"`
	// Timezone is the IANA zone Cron is read in. Default UTC.
	Timezone string `yaml:"timezone"`
	// Body is the payload of every fire, checked against the task's
	// schema at load.
	Body yaml.Node `yaml:"body"`
	// Overlap is skip, buffer_one or allow. Default skip.
	Overlap job.Overlap `yaml:"overlap"`
	// Catchup is none, one or all. Default none.
	Catchup job.Catchup `yaml:"catchup"`
	// CatchupWindow is how late a slot may be and still be caught up.
	// Required with catchup one or all.
	CatchupWindow time.Duration `yaml:"catchup_window"`
	// Jitter delays each fire by up to this, derived from the slot.
	// Default 0.
	Jitter time.Duration `yaml:"jitter"`
}

// JobsSchedules bounds the schedules tenants create through the API.
type JobsSchedules struct {
	// MaxPerTenant is the most schedules one tenant may create through
	// the API. Default 100.
	MaxPerTenant int `yaml:"max_per_tenant"`
	// MinInterval is the shortest time apart a schedule's slots may be,
	// in the API and in schedules. Default 1m.
	MinInterval time.Duration `yaml:"min_interval"`
}

// defaultSchedulesPerTenant is JobsSchedules.MaxPerTenant when it is not
// written.
const defaultSchedulesPerTenant = 100

func (c *Config) scheduleDefaults() {
	setDefault(&c.JobsAPI.Schedules.MaxPerTenant, defaultSchedulesPerTenant)
	setDefault(&c.JobsAPI.Schedules.MinInterval, job.DefaultMinInterval)
}

// validateSchedules checks schedules against the compiled jobs and keeps
// the valid ones for Schedules.
func (c *Config) validateSchedules(bad badFunc) {
	nonNegative(bad, "jobs_api.schedules.max_per_tenant", c.JobsAPI.Schedules.MaxPerTenant)
	nonNegative(bad, "jobs_api.schedules.min_interval", c.JobsAPI.Schedules.MinInterval)
	c.schedules = nil
	ids := map[string]int{}
	for i := range c.DeclaredSchedules {
		s := &c.DeclaredSchedules[i]
		at := fmt.Sprintf("schedules[%d]", i)
		ok := true
		fail := func(key, format string, args ...any) {
			ok = false
			bad(key, format, args...)
		}
		switch {
		case s.ID == "":
			fail(at+".id", "required: the name the API and explain --schedule use")
		case !validTask(s.ID):
			fail(at+".id", "%q may only contain a-z, 0-9, '_', '.', ':' and '-'", s.ID)
		default:
			if j, dup := ids[s.Tenant+"\x00"+s.ID]; dup {
				fail(at+".id", "%q is also the id of schedules[%d] of tenant %q", s.ID, j, s.Tenant)
			} else {
				ids[s.Tenant+"\x00"+s.ID] = i
			}
		}
		if s.Tenant == "" {
			fail(at+".tenant", "required: the tenant the fires are submitted for")
		}
		r := job.Recurring{Tenant: s.Tenant, ID: s.ID, Task: s.Task, Overlap: s.Overlap, Catchup: s.Catchup,
			CatchupWindow: s.CatchupWindow, Jitter: s.Jitter, Source: job.SourceConfig}
		if s.Body.Kind != 0 {
			doc, err := yamljson.Convert(&s.Body)
			if err != nil {
				fail(at+".body", "%v", err)
			}
			r.Body = doc
		}
		spec, _ := c.Job(s.Task)
		if s.Task == "" {
			fail(at+".task", "required: a declared job (jobs[].task)")
			spec = nil
		}
		tm, errs := job.CheckDeclaration(s.Cron, s.Every, s.Timezone, r, spec, c.JobsAPI.Schedules.MinInterval, time.Now())
		for _, e := range errs {
			if e.Field == "task" && s.Task == "" {
				continue
			}
			fail(at+"."+e.Field, "%s", e.Message)
		}
		if ok {
			r.Timing = tm
			c.schedules = append(c.schedules, r)
		}
	}
}

// Schedules returns the valid schedules, compiled.
func (c *Config) Schedules() []job.Recurring { return append([]job.Recurring(nil), c.schedules...) }
