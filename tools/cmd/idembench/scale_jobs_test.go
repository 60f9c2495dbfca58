package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// TestJobsGrowthStaysBounded runs the jobs growth bench for a few seconds
// with a one-second retention: the janitor must keep every table to about
// a retention's worth of jobs while several times that are written, and
// delete nothing it must keep. The bounds are loose so that a slow
// machine passes; a janitor that deletes nothing, or too much, does not.
func TestJobsGrowthStaysBounded(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	o := jobsOptions{
		duration: 6 * time.Second, rate: 400, retention: time.Second,
		interval: 250 * time.Millisecond, batch: 200, sample: 500 * time.Millisecond, vacuum: time.Second,
	}
	rep, err := runJobsGrowth(t.Context(), pool, o, "t-", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Check
	if c.Recent == 0 || c.RecentLeft != c.Recent {
		t.Errorf("%d of the %d final jobs within the retention are left, want all", c.RecentLeft, c.Recent)
	}
	if c.Kept != 7*jobsKeptEach || c.KeptLeft != c.Kept {
		t.Errorf("%d of the %d unfinished jobs, jobs with a callback in flight and executions in flight are left, want all", c.KeptLeft, c.Kept)
	}
	if c.Orphans != 0 || c.Missing != 0 {
		t.Errorf("%d ledger or callback rows outlived their job, %d attempt rows are missing; want 0 and 0", c.Orphans, c.Missing)
	}
	if rep.Deleted["jobs"] < rep.Backlog/2 || rep.Deleted["job_executions"] < rep.Backlog/2 {
		t.Errorf("deleted %d jobs and %d executions, want at least the %d of the backlog past the retention", rep.Deleted["jobs"], rep.Deleted["job_executions"], rep.Backlog/2)
	}

	// What is left is about a retention's worth of jobs, far below what
	// was written.
	bound := int64(2*o.rate*(o.retention+o.interval).Seconds()) + 6*jobsKeptEach + int64(o.batch)
	if rep.Written < 2*bound {
		t.Fatalf("only %d jobs written, the bound %d cannot tell a janitor that works from one that does not", rep.Written, bound)
	}
	var jobs, attempts, executions, callbacks, callbackAttempts int64
	err = pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_attempts),
	(SELECT count(*) FROM job_executions WHERE status IN ($1, $2)), (SELECT count(*) FROM job_callbacks), (SELECT count(*) FROM job_callback_attempts)`,
		job.StatusSucceeded, job.StatusFailed).Scan(&jobs, &attempts, &executions, &callbacks, &callbackAttempts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table string
		rows  int64
		bound int64
	}{
		{"jobs", jobs, bound},
		{"job_attempts", attempts, 2 * bound}, // 1.2 attempts a job
		{"job_executions (succeeded, failed)", executions, bound},
		{"job_callbacks", callbacks, bound},
		{"job_callback_attempts", callbackAttempts, bound},
	} {
		if tc.rows > tc.bound {
			t.Errorf("%s: %d rows left of %d jobs written, want at most %d", tc.table, tc.rows, rep.Written, tc.bound)
		}
	}
	if len(rep.Samples) < 3 {
		t.Errorf("%d samples in a %v run every %v", len(rep.Samples), o.duration, o.sample)
	}
	md := rep.markdown()
	for _, want := range []string{"| s | written | jobs rows | size |", "Kept as they must be"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

func TestScaleFlagsJobs(t *testing.T) {
	t.Parallel()
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"jobs alone", []string{"-stores", "jobs", "-jobs-retention", "30s", "-jobs-duration", "90s"}, true},
		{"with a store", []string{"-stores", "postgres,jobs"}, true},
		{"unknown store", []string{"-stores", "mysql"}, false},
		{"interval past the retention", []string{"-stores", "jobs", "-jobs-retention", "5s", "-jobs-janitor-interval", "10s"}, false},
		{"no rate", []string{"-stores", "jobs", "-jobs-rate", "0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseScaleFlags(tc.args, getenv, io.Discard)
			if (err == nil) != tc.ok {
				t.Fatalf("parseScaleFlags(%q) = %v, want ok %t", tc.args, err, tc.ok)
			}
			if tc.ok && jobsOnly(o.stores) != (len(o.stores) == 1) {
				t.Errorf("jobsOnly(%q) = %t", o.stores, jobsOnly(o.stores))
			}
		})
	}
}
