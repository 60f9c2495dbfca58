package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

func TestSchedulesValid(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(enqueueBase+fairJob("")+`schedules:
  - id: nightly-booking
    tenant: acme
    task: shipment.book
    cron: "0 2 * * *"
    timezone: Europe/Paris
    body: {id: s-1}
    overlap: skip
    catchup: one
    catchup_window: 1h
    jitter: 30s
  - {id: sync, tenant: acme, task: shipment.book, every: 15m, body: {id: s-2}}
jobs_api:
  schedules: {max_per_tenant: 10}
`), "x.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	got := cfg.Schedules()
	if len(got) != 2 || got[0].Timing.Zone.String() != "Europe/Paris" || got[0].Jitter != 30*time.Second ||
		got[0].Catchup != job.CatchupOne || string(got[0].Body) != `{"id":"s-1"}` || got[1].Timing.Every != 15*time.Minute {
		t.Fatalf("schedules %+v", got)
	}
	if s := cfg.JobsAPI.Schedules; s.MaxPerTenant != 10 || s.MinInterval != time.Minute {
		t.Fatalf("jobs_api.schedules %+v: want 10 and the default 1m", s)
	}
}

// Every problem of every schedule is reported at once.
func TestSchedulesValidate(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(enqueueBase+fairJob("")+`schedules:
  - {id: a, tenant: acme, task: shipment.book, cron: "0 25 * * *", body: {id: x}}
  - {id: b, tenant: acme, task: shipment.book, cron: "0 2 * * *", timezone: Mars/Olympus, body: {id: 7}}
  - {id: c, tenant: acme, task: shipment.book, every: 10s, body: {id: x}, overlap: sometimes}
  - {id: d, tenant: acme, task: nope, every: 1h, body: {id: x}}
  - {id: a, tenant: acme, task: shipment.book, every: 1h, body: {id: x}, catchup: all}
`), "x.yaml", nil)
	if err == nil {
		t.Fatal("Parse accepted the configuration")
	}
	got := strings.Split(err.Error(), "\n")
	for _, want := range []string{
		"schedules[0].cron:",
		"schedules[1].timezone: timezone \"Mars/Olympus\" is not an IANA zone name",
		"schedules[1].body.id:",
		"schedules[2].every: fires 10s apart, below the minimum interval of 1m0s",
		"schedules[2].overlap: \"sometimes\" is not skip, buffer_one or allow",
		"schedules[3].task: \"nope\" is not a declared job",
		"schedules[4].id: \"a\" is also the id of schedules[0] of tenant \"acme\"",
		"schedules[4].catchup_window: required with catchup all",
	} {
		if !slices.ContainsFunc(got, func(line string) bool { return strings.Contains(line, want) }) {
			t.Errorf("no problem says %q in:\n%s", want, err)
		}
	}
}
