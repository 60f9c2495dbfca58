package explain

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/workers/execution"
)

func (x *Explainer) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

// judge writes the verdict. effectsKnown says the effects come from the
// business tables of the job's task, so that none means the effect is
// missing; the document does not carry it, as the schema has no field for
// it.
func (x *Explainer) judge(s *Story, effectsKnown bool) {
	if s.Job == nil {
		judgeKey(s, x.now())
		return
	}
	stuckAfter := x.StuckAfter
	if stuckAfter <= 0 {
		stuckAfter = DefaultStuckAfter
	}
	j := s.Job
	var succeeded []openapi.StoryAttempt
	for _, a := range s.Attempts {
		if a.Outcome == openapi.StoryAttemptOutcome(execution.OutcomeSucceeded) {
			succeeded = append(succeeded, a)
		}
	}
	violation := func(format string, args ...any) {
		s.Verdict, s.Violation = fmt.Sprintf(format, args...), true
	}
	switch {
	case len(s.Effects) > 1:
		refs := make([]string, len(s.Effects))
		for i, e := range s.Effects {
			refs[i] = e.Kind + " " + e.Ref
		}
		violation("%s effects for one business key: %s", count(len(s.Effects)), strings.Join(refs, ", "))
	case len(succeeded) > 1:
		violation("succeeded %d times: %s", len(succeeded), attemptList(succeeded))
	case j.Status == openapi.JobStatus(job.StatusSucceeded):
		switch {
		case s.Execution == nil:
			violation("the job succeeded but %s has no execution", j.BusinessKey)
		case s.Execution.Status != string(job.StatusSucceeded):
			violation("the job succeeded but the execution of %s is %s", j.BusinessKey, s.Execution.Status)
		case effectsKnown && len(s.Effects) == 0:
			violation("succeeded (result %s) but its effect is missing", s.Execution.ResultRef)
		case len(succeeded) == 1 && j.CancelRequestedAt != nil:
			s.Verdict = fmt.Sprintf("succeeded once at attempt %d with token %d: a cancel arrived while it ran, and the attempt succeeded",
				succeeded[0].Attempt, *succeeded[0].FencingToken)
		case len(succeeded) == 1:
			s.Verdict = fmt.Sprintf("succeeded once at attempt %d with token %d", succeeded[0].Attempt, *succeeded[0].FencingToken)
		default:
			s.Verdict = fmt.Sprintf("succeeded once (result %s); the ledger holds no succeeded attempt (older than the ledger, or past its retention)", s.Execution.ResultRef)
		}
	case j.Status == openapi.JobStatus(job.StatusFailed):
		if effectsKnown && len(s.Effects) > 0 {
			violation("failed, but %s %s carries its business key", s.Effects[0].Kind, s.Effects[0].Ref)
			return
		}
		cause := ""
		if j.Error != nil {
			cause = ": " + *j.Error
		}
		s.Verdict = fmt.Sprintf("failed after %d attempt(s)%s", j.Attempts, cause)
	case j.Status == openapi.JobStatus(job.StatusScheduled) && j.NotBefore != nil:
		s.Verdict = fmt.Sprintf("scheduled: not before %s (in %s), %s",
			j.NotBefore.UTC().Format(time.RFC3339), span(j.NotBefore.Sub(x.now())), taskPhrase(j))
	case j.Status == openapi.JobStatus(job.StatusCancelled):
		judgeCancelled(s, effectsKnown)
	default:
		// A scheduled job waited for its time; it is late only after it.
		since := j.UpdatedAt
		if j.NotBefore != nil && j.NotBefore.After(since) {
			since = *j.NotBefore
		}
		age := x.now().Sub(since)
		if age > stuckAfter {
			violation("stuck: %s for %s, %s", j.Status, span(age), taskPhrase(j))
			return
		}
		s.Verdict = fmt.Sprintf("in progress: %s, %d attempt(s) so far, %s", j.Status, j.Attempts, taskPhrase(j))
	}
}

// judgeCancelled says which case a cancelled job is: cancelled before any
// attempt, an attempt stopped or fenced out with no effect, or an HTTP
// delivery that never answered, so the receiver may have applied it.
func judgeCancelled(s *Story, effectsKnown bool) {
	var stopped *openapi.StoryAttempt
	for i := range s.Attempts {
		a := &s.Attempts[i]
		if a.Outcome == openapi.StoryAttemptOutcome(execution.OutcomeCancelled) && a.FencingToken != nil {
			stopped = a
		}
	}
	if effectsKnown && len(s.Effects) > 0 {
		s.Verdict, s.Violation = fmt.Sprintf("cancelled, but %s %s carries its business key", s.Effects[0].Kind, s.Effects[0].Ref), true
		return
	}
	switch {
	case stopped == nil && s.Job.Attempts == 0:
		s.Verdict = "cancelled before any attempt: nothing ran"
	case stopped == nil:
		s.Verdict = fmt.Sprintf("cancelled between attempts after %d attempt(s): no attempt ran after the cancel", s.Job.Attempts)
	case strings.HasPrefix(stopped.Error, execution.CancelledNoAnswer):
		s.Verdict = fmt.Sprintf("cancelled in flight at attempt %d with token %d, the HTTP answer unknown: the receiver may have applied it",
			stopped.Attempt, *stopped.FencingToken)
	case strings.HasPrefix(stopped.Error, execution.CancelledFenced):
		s.Verdict = fmt.Sprintf("cancelled in flight at attempt %d with token %d: its effect was fenced out by the cancel",
			stopped.Attempt, *stopped.FencingToken)
	default:
		s.Verdict = fmt.Sprintf("cancelled in flight at attempt %d with token %d: the attempt stopped without its effect",
			stopped.Attempt, *stopped.FencingToken)
	}
}

// span is d as an operator reads it: 14m, 1h14m, 40s.
func span(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

func count(n int) string {
	if n == 2 {
		return "two"
	}
	return fmt.Sprint(n)
}

func attemptList(as []openapi.StoryAttempt) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("attempt %d (token %s)", a.Attempt, tokenText(a.FencingToken))
	}
	return strings.Join(parts, ", ")
}

func taskPhrase(j *openapi.StoryJob) string {
	state := value(j.TaskState)
	switch state {
	case "":
		return "its task not looked up"
	case "missing":
		return "no task in the queue"
	}
	return fmt.Sprintf("its task %s in queue %s", state, j.Queue)
}

// judgeKey is the verdict of a key without a job (a proxied request).
func judgeKey(s *Story, now time.Time) {
	var completed []openapi.StoryClaim
	for _, c := range s.Claims {
		if c.Outcome == openapi.StoryClaimOutcomeCompleted {
			completed = append(completed, c)
		}
	}
	if len(completed) > 1 {
		toks := make([]string, len(completed))
		for i, c := range completed {
			toks[i] = fmt.Sprint(c.FencingToken)
		}
		s.Verdict, s.Violation = fmt.Sprintf("completed %d times (tokens %s)", len(completed), strings.Join(toks, ", ")), true
		return
	}
	claims := ""
	if len(s.Claims) > 1 {
		claims = fmt.Sprintf(", after %d claims", len(s.Claims))
	}
	r := s.Record
	if r == nil {
		s.Verdict = fmt.Sprintf("no record (expired or deleted)%s", claims)
		return
	}
	switch idempotency.State(r.State) {
	case idempotency.StateCompleted:
		s.Verdict = fmt.Sprintf("completed once with token %d, status %s%s", r.FencingToken, statusText(r.Status), claims)
	case idempotency.StateInFlight:
		if r.LeaseUntil != nil && r.LeaseUntil.After(now) {
			s.Verdict = fmt.Sprintf("in flight with token %d, lease until %s%s", r.FencingToken, r.LeaseUntil.UTC().Format(time.RFC3339), claims)
		} else {
			s.Verdict = fmt.Sprintf("in flight with token %d, lease expired: the next retry takes it over%s", r.FencingToken, claims)
		}
	case idempotency.StateUnknown:
		s.Verdict = fmt.Sprintf("outcome unknown at token %d: check the upstream, then `idemgate keys resolve`%s", r.FencingToken, claims)
	default:
		s.Verdict = fmt.Sprintf("%s at token %d: the next retry runs again%s", r.State, r.FencingToken, claims)
	}
}
