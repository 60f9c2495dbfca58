package explain

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/workers/execution"
)

// ledgerCase is one way a ledger row can end.
type ledgerCase struct {
	name    string
	outcome execution.Outcome
	err     string
	noToken bool
}

func ledgerCases() []ledgerCase {
	return []ledgerCase{
		{name: "running"},
		{name: "succeeded", outcome: execution.OutcomeSucceeded},
		{name: "transient", outcome: execution.OutcomeTransient, err: "partner answered 500"},
		{name: "unavailable", outcome: execution.OutcomeUnavailable, err: "deliver to http://r/: 503 Service Unavailable"},
		{name: "unavailable, no answer", outcome: execution.OutcomeUnavailable, err: execution.NoAnswer + ": deliver to http://r/: EOF"},
		{name: "timed out", outcome: execution.OutcomeUnavailable, err: "deliver to http://r/: no answer within 2s: context deadline exceeded"},
		{name: "transient, no answer", outcome: execution.OutcomeTransient, err: execution.NoAnswer + ": deliver to http://r/: context canceled"},
		{name: "permanent", outcome: execution.OutcomePermanent, err: "deliver to http://r/: 422"},
		{name: "exhausted, no answer", outcome: execution.OutcomeUnavailable, err: "attempts exhausted (5 of 5): " + execution.NoAnswer + ": deliver: EOF"},
		{name: "lock_busy", outcome: execution.OutcomeLockBusy, noToken: true},
		{name: "limited", outcome: execution.OutcomeLimited, noToken: true},
		{name: "lock_lost", outcome: execution.OutcomeLockLost},
		{name: "stale_token", outcome: execution.OutcomeStaleToken},
		{name: "superseded", outcome: execution.OutcomeSuperseded},
		{name: "crashed", outcome: execution.OutcomeCrashed},
		{name: "cancelled, stopped", outcome: execution.OutcomeCancelled, err: execution.CancelledStopped + ": deliver to http://r/: 500"},
		{name: "cancelled, never ended", outcome: execution.OutcomeCancelled, err: errNeverEnded},
		{name: "cancelled, fenced", outcome: execution.OutcomeCancelled, err: execution.CancelledFenced + ": stale token"},
		{name: "cancelled, no answer", outcome: execution.OutcomeCancelled, err: execution.CancelledNoAnswer + ": deliver: EOF"},
		{name: "cancelled before", outcome: execution.OutcomeCancelled, err: execution.CancelledBefore, noToken: true},
	}
}

// mayHaveHappened is, apart from the code under test, when a row of a job
// whose effect nothing here shows leaves that effect possible: the
// attempt drew a token and did not end with an answer that rules it out.
func mayHaveHappened(c ledgerCase, delivered bool) bool {
	if c.noToken {
		return false
	}
	switch {
	case strings.Contains(c.err, execution.NoAnswer), strings.Contains(c.err, "no answer within"),
		strings.HasPrefix(c.err, execution.CancelledNoAnswer), c.err == errNeverEnded:
		return true
	}
	switch c.outcome {
	case "", execution.OutcomeCrashed, execution.OutcomeLockLost, execution.OutcomeStaleToken:
		return true
	case execution.OutcomeCancelled:
		return !delivered && !strings.HasPrefix(c.err, execution.CancelledFenced)
	}
	return false
}

var (
	withToken  = regexp.MustCompile(`attempt (\d+) with token (\d+)`)
	tokenAfter = regexp.MustCompile(`attempt (\d+) \(token (\d+)\)`)
	byJob      = regexp.MustCompile(`by job (\S+)`)
)

// TestVerdictClaimsNoMore: for every job status, every way the row before
// the verdict can end, written by the job or by a sibling on the same
// business key, with the task's effects known or not, an effect or none,
// and delivered over HTTP or not, the verdict claims no more than the
// ledger shows: each attempt and token it names is a row of the job's own
// (or, for "by job X", of that sibling), "nothing ran" only when no row of
// the job drew a token, no "no effect" story while an attempt may have
// applied it (then the verdict is uncertain, drawn in amber), a sibling's
// row or effect never makes the job's verdict, and never a violation.
func TestVerdictClaimsNoMore(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	x := &Explainer{StuckAfter: 10 * time.Minute, Now: func() time.Time { return now }, Delivered: delivered}
	n := 0
	for _, status := range job.Statuses() {
		for _, c := range ledgerCases() {
			for _, sibling := range []bool{false, true} {
				for _, known := range []bool{false, true} {
					for _, effect := range []string{"none", "own", "sibling's"} {
						for _, task := range []string{"shipment.book", "payment.charge"} {
							name := fmt.Sprintf("%s/%s/sibling=%v/known=%v/effect=%s/%s", status, c.name, sibling, known, effect, task)
							s := claimStory(status, c, sibling, effect, task, now)
							x.judge(&s, known)
							checkClaims(t, name, &s, c, sibling, known, effect, x.delivered(task))
							n++
						}
					}
				}
			}
		}
	}
	t.Logf("%d stories judged", n)
}

// claimStory is a job with status whose business key's ledger holds one
// row ending as c, its own or a sibling's.
func claimStory(status job.Status, c ledgerCase, sibling bool, effect, task string, now time.Time) Story {
	j := &openapi.StoryJob{Id: "job_me", Status: openapi.JobStatus(status), Task: task, BusinessKey: "k:1", Queue: "default",
		TaskState: ptr("retry"), UpdatedAt: now.Add(-time.Minute)}
	if status == job.StatusScheduled {
		j.NotBefore = ptr(now.Add(time.Hour))
	}
	e := execution.Entry{JobID: "job_me", Attempt: 1, FencingToken: 7, Outcome: c.outcome, Error: c.err, StartedAt: now.Add(-time.Minute)}
	if sibling {
		e.JobID = "job_other"
	}
	if c.noToken {
		e.FencingToken = 0
	}
	if c.outcome != "" {
		e.EndedAt = now
	}
	s := Story{Job: j, Attempts: ledgerRows("job_me", []execution.Entry{e}), Effects: []openapi.StoryEffect{}}
	exStatus := "processing"
	switch {
	case c.outcome == execution.OutcomeSucceeded:
		exStatus = "succeeded"
	case status.Final() && c.outcome != "":
		exStatus = string(status)
	}
	s.Execution = &openapi.StoryExecution{Status: exStatus, Attempts: 1, FencingToken: 7, ResultRef: "r_1"}
	switch effect {
	case "own":
		s.Effects = append(s.Effects, openapi.StoryEffect{Kind: "shipment", Ref: "r_1", JobId: ptr("job_me")})
	case "sibling's":
		s.Effects = append(s.Effects, openapi.StoryEffect{Kind: "shipment", Ref: "r_1", JobId: ptr("job_other"), Sibling: ptr(true)})
	}
	return s
}

func checkClaims(t *testing.T, name string, s *Story, c ledgerCase, sibling, known bool, effect string, delivered bool) {
	t.Helper()
	v := s.Verdict
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: verdict %q (violation %v, uncertain %v): %s", name, v, s.Violation, s.Uncertain, fmt.Sprintf(format, args...))
	}
	if v == "" {
		fail("empty")
		return
	}
	row := s.Attempts[0]
	named := append(withToken.FindAllStringSubmatch(v, -1), tokenAfter.FindAllStringSubmatch(v, -1)...)
	for _, m := range named {
		attempt, _ := strconv.Atoi(m[1])
		token, _ := strconv.ParseInt(m[2], 10, 64)
		if row.Attempt != attempt || row.FencingToken == nil || *row.FencingToken != token {
			fail("names attempt %d with token %d, which no row holds", attempt, token)
		}
		if row.Sibling {
			fail("names the sibling's attempt %d (token %d) as the job's", attempt, token)
		}
	}
	if strings.Contains(v, "succeeded once at attempt") && (sibling || c.outcome != execution.OutcomeSucceeded) {
		fail("claims a success of the job's own the ledger does not hold")
	}
	ownToken := !sibling && !c.noToken
	if (strings.Contains(v, "nothing ran") || strings.Contains(v, "ran nothing") || strings.Contains(v, "without an attempt of its own")) && ownToken {
		fail("says nothing ran, but the job's own attempt drew token 7")
	}
	if m := byJob.FindStringSubmatch(v); m != nil && (!sibling || m[1] != "job_other") {
		fail("names job %s, which wrote no row", m[1])
	}
	if known && s.Uncertain {
		fail("uncertain although the effects are read from the business tables")
	}
	if s.Violation && s.Uncertain {
		fail("both a violation and uncertain")
	}
	status := job.Status(s.Job.Status)
	if !known && ownToken && mayHaveHappened(c, delivered) && status != job.StatusSucceeded && !s.Violation {
		if !s.Uncertain {
			fail("not uncertain, though the attempt may have applied it")
		}
		for _, calm := range []string{"nothing ran", "no attempt ran", "without its effect", "fenced out"} {
			if strings.Contains(v, calm) {
				fail("says %q, though the attempt may have applied it", calm)
			}
		}
		if !strings.Contains(v, "may have") {
			fail("does not say the effect may have happened")
		}
	}
	if s.Uncertain && !(ownToken && mayHaveHappened(c, delivered)) {
		fail("uncertain without an attempt of the job's own that may have applied it")
	}
	if effect == "sibling's" && s.Violation && (status == job.StatusFailed || status == job.StatusCancelled) {
		fail("the sibling's effect is judged as the job's")
	}
	if effect == "own" && known && (status == job.StatusFailed || status == job.StatusCancelled) && !s.Violation {
		fail("the job's own effect after it %s is no violation", status)
	}
}
