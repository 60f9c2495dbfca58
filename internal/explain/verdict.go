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
// missing; the document carries it as effects_known.
//
// The verdict rests on the job's own ledger rows and effects: rows and
// effects of sibling jobs on the same business key are shown, never
// judged as the job's. It claims no more than they show: where the
// effect lives elsewhere (an HTTP delivery's receiver) and an attempt got
// no answer, it says the effect may have happened, and is uncertain.
func (x *Explainer) judge(s *Story, effectsKnown bool) {
	s.EffectsKnown = effectsKnown
	if s.Job == nil {
		judgeKey(s, x.now())
		return
	}
	stuckAfter := x.StuckAfter
	if stuckAfter <= 0 {
		stuckAfter = DefaultStuckAfter
	}
	j := s.Job
	own := ownRows(s.Attempts)
	var succeeded []openapi.StoryAttempt
	for _, a := range own {
		if a.Outcome == openapi.StoryAttemptOutcome(execution.OutcomeSucceeded) {
			succeeded = append(succeeded, a)
		}
	}
	mine := ownEffects(s.Effects)
	violation := func(format string, args ...any) {
		s.Verdict, s.Violation = fmt.Sprintf(format, args...), true
	}
	// unknown is what the ledger cannot rule out when the effect lives
	// where explain cannot read it.
	unknown := ""
	if !effectsKnown {
		unknown = mayHaveApplied(own, x.delivered(j.Task))
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
		sib := siblingDone(s)
		switch {
		case s.Execution == nil:
			violation("the job succeeded but %s has no execution", j.BusinessKey)
		case s.Execution.Status != string(job.StatusSucceeded):
			violation("the job succeeded but the execution of %s is %s", j.BusinessKey, s.Execution.Status)
		case len(succeeded) == 0 && len(ownTokened(s.Attempts)) == 0 && sib != "":
			// A duplicate of the sibling's payload is acked with its
			// result: this job ran nothing.
			s.Verdict = fmt.Sprintf("succeeded without an attempt of its own: business key %s was already done by job %s (result %s)",
				j.BusinessKey, sib, s.Execution.ResultRef)
		case effectsKnown && len(mine) == 0:
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
		if effectsKnown && len(mine) > 0 {
			violation("failed, but %s %s carries its business key", mine[0].Kind, mine[0].Ref)
			return
		}
		if len(ownTokened(s.Attempts)) == 0 {
			if sib, running := siblingHolder(s); sib != "" {
				if running {
					s.Verdict = fmt.Sprintf("refused: business key %s was being processed by job %s with another payload; this job ran nothing", j.BusinessKey, sib)
				} else {
					s.Verdict = fmt.Sprintf("refused: business key %s already done by job %s (result %s); this job ran nothing",
						j.BusinessKey, sib, s.Execution.ResultRef)
				}
				return
			}
		}
		cause := ""
		if j.Error != nil {
			cause = ": " + *j.Error
		}
		s.Verdict = fmt.Sprintf("failed after %d attempt(s)%s", attemptsOf(j, own), cause)
		uncertainly(s, unknown)
	case j.Status == openapi.JobStatus(job.StatusScheduled) && j.NotBefore != nil:
		s.Verdict = fmt.Sprintf("scheduled: not before %s (in %s), %s",
			j.NotBefore.UTC().Format(time.RFC3339), span(j.NotBefore.Sub(x.now())), taskPhrase(j))
		uncertainly(s, unknown)
	case j.Status == openapi.JobStatus(job.StatusCancelled):
		if effectsKnown && len(mine) > 0 {
			violation("cancelled, but %s %s carries its business key", mine[0].Kind, mine[0].Ref)
			return
		}
		if unknown != "" {
			s.Verdict, s.Uncertain = fmt.Sprintf("cancelled after %s: %s", triesText(j, own), unknown), true
			return
		}
		judgeCancelled(s, own)
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
		s.Verdict = fmt.Sprintf("in progress: %s, %d attempt(s) so far, %s", j.Status, attemptsOf(j, own), taskPhrase(j))
		uncertainly(s, unknown)
	}
}

// uncertainly adds what the ledger cannot rule out to the verdict.
func uncertainly(s *Story, unknown string) {
	if unknown != "" {
		s.Verdict += "; " + unknown
		s.Uncertain = true
	}
}

func (x *Explainer) delivered(task string) bool {
	return x.Delivered != nil && x.Delivered(task)
}

// judgeCancelled says which case a cancelled job whose every attempt
// ended with an answer (or whose effects explain reads) is: cancelled
// before any attempt, between attempts, or an attempt stopped or fenced
// out with no effect.
func judgeCancelled(s *Story, own []openapi.StoryAttempt) {
	j := s.Job
	var stopped *openapi.StoryAttempt
	for i := range own {
		a := &own[i]
		if a.Outcome == openapi.StoryAttemptOutcome(execution.OutcomeCancelled) && a.FencingToken != nil {
			stopped = a
		}
	}
	tokened := len(ownTokened(own))
	switch {
	case stopped == nil && tokened == 0 && (len(own) > 0 || j.Attempts == 0):
		// Without rows of its own, only the document's count can say
		// nothing ran (a job older than the ledger says otherwise).
		s.Verdict = "cancelled before any attempt: nothing ran"
	case stopped == nil:
		s.Verdict = fmt.Sprintf("cancelled between attempts after %s: no attempt ran after the cancel", triesText(j, own))
	case strings.HasPrefix(stopped.Error, execution.CancelledFenced):
		s.Verdict = fmt.Sprintf("cancelled in flight at attempt %d with token %d: its effect was fenced out by the cancel",
			stopped.Attempt, *stopped.FencingToken)
	default:
		s.Verdict = fmt.Sprintf("cancelled in flight at attempt %d with token %d: the attempt stopped without its effect",
			stopped.Attempt, *stopped.FencingToken)
	}
}

// mayHaveApplied names the job's attempts that may have had an effect
// nothing here shows ("" when none may have): an attempt that got no
// answer, timed out, crashed, lost its lock or its ownership after its
// call, or, for a Go function, was stopped by a cancel midway. A delivery
// a cancel stopped after the receiver answered a failure had no effect.
func mayHaveApplied(own []openapi.StoryAttempt, delivered bool) string {
	var parts []string
	for _, a := range own {
		if a.FencingToken == nil || !maybeApplied(a, delivered) {
			continue
		}
		parts = append(parts, fmt.Sprintf("attempt %d (token %d)", a.Attempt, *a.FencingToken))
	}
	if len(parts) == 0 {
		return ""
	}
	who := "its effect may have happened"
	if delivered {
		who = "the receiver may have applied it"
	}
	return who + " at " + strings.Join(parts, " or ")
}

func maybeApplied(a openapi.StoryAttempt, delivered bool) bool {
	if execution.Unanswered(a.Error) {
		return true
	}
	switch execution.Outcome(a.Outcome) {
	case "", execution.OutcomeCrashed, execution.OutcomeLockLost, execution.OutcomeStaleToken:
		return true
	case execution.OutcomeCancelled:
		return !strings.HasPrefix(a.Error, execution.CancelledFenced) &&
			(!delivered || strings.HasPrefix(a.Error, errNeverEnded))
	}
	return false
}

// errNeverEnded starts the ledger error of an attempt a crash left open
// that a cancel ended (execution's errStopped).
const errNeverEnded = execution.CancelledStopped + ": the attempt never recorded its end"

// ownRows are the ledger rows the job itself wrote.
func ownRows(as []openapi.StoryAttempt) []openapi.StoryAttempt {
	var out []openapi.StoryAttempt
	for _, a := range as {
		if !a.Sibling {
			out = append(out, a)
		}
	}
	return out
}

// ownTokened are the job's own rows that drew a fencing token: attempts
// that ran (or may have run) its function.
func ownTokened(as []openapi.StoryAttempt) []openapi.StoryAttempt {
	var out []openapi.StoryAttempt
	for _, a := range as {
		if !a.Sibling && a.FencingToken != nil {
			out = append(out, a)
		}
	}
	return out
}

// countedOf is how many counted attempts the job's own rows show: the
// number of the last one of its latest run.
func countedOf(own []openapi.StoryAttempt) int {
	n := 0
	for _, a := range own {
		if a.Counted {
			n = a.Attempt
		}
	}
	return n
}

// attemptsOf is the job's counted attempts as its own ledger rows show
// them, or as its document has them when the ledger holds none of its
// rows (older than the ledger).
func attemptsOf(j *openapi.StoryJob, own []openapi.StoryAttempt) int {
	if len(own) == 0 {
		return j.Attempts
	}
	return countedOf(own)
}

// triesText is how many times the job was tried, counted or not.
func triesText(j *openapi.StoryJob, own []openapi.StoryAttempt) string {
	tokened, counted := 0, attemptsOf(j, own)
	for _, a := range own {
		if a.FencingToken != nil {
			tokened++
		}
	}
	if tokened == counted {
		return fmt.Sprintf("%d attempt(s)", counted)
	}
	if tokened == 1 {
		return fmt.Sprintf("1 try (%d counted)", counted)
	}
	return fmt.Sprintf("%d tries (%d counted)", tokened, counted)
}

// ownEffects are the effects not attributed to a sibling job.
func ownEffects(es []openapi.StoryEffect) []openapi.StoryEffect {
	var out []openapi.StoryEffect
	for _, e := range es {
		if e.Sibling == nil || !*e.Sibling {
			out = append(out, e)
		}
	}
	return out
}

// siblingDone is the sibling job whose succeeded attempt did the business
// key's effect ("" when the ledger shows none).
func siblingDone(s *Story) string {
	done := ""
	for _, a := range s.Attempts {
		if a.Outcome == openapi.StoryAttemptOutcome(execution.OutcomeSucceeded) {
			done = ""
			if a.Sibling && a.JobId != "" {
				done = a.JobId
			}
		}
	}
	return done
}

// siblingHolder is the sibling job that holds the business key a job
// refused without an attempt could not take: the one whose attempt
// succeeded, or the one whose attempt was running (running true); ""
// when the ledger shows neither.
func siblingHolder(s *Story) (id string, running bool) {
	if s.Execution == nil {
		return "", false
	}
	if s.Execution.Status == string(job.StatusSucceeded) {
		return siblingDone(s), false
	}
	if s.Execution.Status != string(job.StatusProcessing) {
		return "", false
	}
	for i := len(s.Attempts) - 1; i >= 0; i-- {
		if a := s.Attempts[i]; a.FencingToken != nil {
			if a.Sibling && a.JobId != "" {
				return a.JobId, true
			}
			return "", false
		}
	}
	return "", false
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
