package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemgate/idemgate/lincheck"
)

// Row is what one scenario measured. A nil count was not measured: the
// job counts need jobs.
type Row struct {
	Scenario string `json:"scenario"`
	// Keys is how many keys the clients sent.
	Keys int `json:"keys"`
	// Reruns counts keys the upstream applied more than once.
	Reruns *int `json:"reruns"`
	// SameTokenReruns counts keys the upstream applied twice with one
	// fencing token: a stale attempt it could not have refused.
	SameTokenReruns *int `json:"same_token_reruns"`
	// LowerTokenAfterHigher counts keys whose upstream saw a token lower
	// than one it had already applied.
	LowerTokenAfterHigher *int `json:"lower_token_after_higher"`
	// TokensNotRising counts keys applied both before and after the fault
	// started whose later token is not above every earlier one.
	TokensNotRising *int `json:"tokens_not_rising"`
	// SplitAnswers counts keys whose clients received different final 2xx
	// answers (different charge or job ids).
	SplitAnswers int `json:"split_answers"`
	// LostKeys counts keys no client got a final answer for.
	LostKeys int `json:"lost_keys"`
	// AcceptedJobs counts jobs answered 202; LostJobs those of them not
	// succeeded when the scenario ended.
	AcceptedJobs *int `json:"accepted_jobs"`
	LostJobs     *int `json:"lost_accepted_jobs"`
	// AnsweredThenRerun counts keys the upstream applied again after a
	// client had been given a 2xx answer for them: the answer a failover
	// forgot.
	AnsweredThenRerun *int `json:"answered_then_rerun"`
	// DoubleDeliveries counts jobs the receiver applied more than once.
	DoubleDeliveries *int `json:"double_deliveries"`
	// ClientErrors counts the clients' exchanges answered 5xx or failed
	// (connection error, timeout); ErrorsBeforeFault those that ended
	// before the fault started (healthy requests refused); ErrorSpanMS
	// is the time from the first of them to the last.
	ClientErrors      int   `json:"client_errors"`
	ErrorsBeforeFault int   `json:"errors_before_fault"`
	ErrorSpanMS       int64 `json:"error_span_ms"`
	// RecoveryMS is the time from the first failed exchange after the
	// fault started to the first 2xx answer to a request sent after that
	// failure (0 when no exchange failed).
	RecoveryMS *int64 `json:"recovery_ms"`
	// TakeoverMS is, over the jobs applied before the fault and again
	// after its start, the longest time from the fault to that next
	// application: how long a job whose worker was cut off waited for
	// another one.
	TakeoverMS *int64 `json:"takeover_ms"`
	// HistoryViolations counts keys whose history — every client
	// exchange and every upstream application with its token — no order
	// of its operations explains under the key model (package history);
	// History shows the shortest violating histories found, and the keys
	// the checker could not decide in time.
	HistoryViolations *int   `json:"history_violations"`
	History           string `json:"history,omitempty"`
	// UnavailableMS is the longest stretch of the load with no 2xx
	// answer, in milliseconds.
	UnavailableMS int64 `json:"unavailable_ms"`
	// Seconds is the scenario's running time, set-up included.
	Seconds float64 `json:"seconds"`
	// Broken lists the guarantees the scenario broke.
	Broken []string `json:"broken"`
	// Error says why the scenario could not run to its end.
	Error string `json:"error,omitempty"`
}

// Failed reports whether the row breaks a guarantee or did not complete.
func (r *Row) Failed() bool { return len(r.Broken) > 0 || r.Error != "" }

// measure fills r from what the clients got, what the upstream applied
// (proxied or delivered), when the fault started, and which accepted jobs
// succeeded (nil for proxied load).
func (r *Row) measure(res *loadResult, applied map[string][]Application, faultStart time.Time, succeeded map[string]bool) {
	r.Keys = len(res.keys)
	for _, k := range res.keys {
		if len(k.answers) == 0 {
			r.LostKeys++
			continue
		}
		ids := map[string]bool{}
		for _, a := range k.answers {
			if a.status >= 200 && a.status < 300 {
				ids[a.id] = true
			}
		}
		if len(ids) > 1 {
			r.SplitAnswers++
		}
	}
	r.UnavailableMS = longestGap(res).Milliseconds()

	if applied != nil {
		var reruns, same, lower, notRising int
		for _, apps := range applied {
			if len(apps) > 1 {
				reruns++
			}
			seen := map[int64]bool{}
			var highest int64
			sameKey, lowerKey := false, false
			for i, a := range apps {
				if seen[a.Token] {
					sameKey = true
				}
				seen[a.Token] = true
				if i > 0 && a.Token < highest {
					lowerKey = true
				}
				highest = max(highest, a.Token)
			}
			if sameKey {
				same++
			}
			if lowerKey {
				lower++
			}
			if !faultStart.IsZero() && !risesAcross(apps, faultStart) {
				notRising++
			}
		}
		r.Reruns, r.SameTokenReruns, r.LowerTokenAfterHigher, r.TokensNotRising = &reruns, &same, &lower, &notRising
	}

	if succeeded != nil {
		accepted, lost := len(succeeded), 0
		for _, ok := range succeeded {
			if !ok {
				lost++
			}
		}
		r.AcceptedJobs, r.LostJobs = &accepted, &lost
	}
	r.checkHistory(res, applied)
	r.Broken = check(r)
}

// historyTimeout bounds the check of one key's history; a key's history is
// a few dozen operations, checked in microseconds.
const historyTimeout = 10 * time.Second

// checkHistory checks the clients' exchanges and the upstream's
// applications against the key model, with the rules that hold in r's
// scenario (keyRules).
func (r *Row) checkHistory(res *loadResult, applied map[string][]Application) {
	ops := applications(applied)
	if res.history != nil {
		ops = append(ops, res.history.Operations()...)
	}
	result := lincheck.Check(lincheck.KeyModel(keyRules(r.Scenario)), ops, historyTimeout)
	n := len(result.Violating)
	r.HistoryViolations = &n
	if !result.Ok() || len(result.Unchecked) > 0 {
		r.History = result.String()
	}
}

// applications are the upstream's applications as the key model's Apply
// operations: instants, at their arrival.
func applications(applied map[string][]Application) []lincheck.Operation {
	var ops []lincheck.Operation
	for key, apps := range applied {
		for _, a := range apps {
			ops = append(ops, lincheck.Operation{Client: -1, Key: key, Input: lincheck.Apply{Token: a.Token}, Call: a.At, Return: a.At})
		}
	}
	return ops
}

// risesAcross reports whether every application from at on carries a
// token above every application before at (true when the key has none on
// one side).
func risesAcross(apps []Application, at time.Time) bool {
	var before int64 = -1
	after := int64(-1)
	for _, a := range apps {
		if a.At.Before(at) {
			before = max(before, a.Token)
		} else if after < 0 || a.Token < after {
			after = a.Token
		}
	}
	return before < 0 || after < 0 || after > before
}

// longestGap is the longest stretch without a 2xx answer, from the start
// of the load to the last 2xx or the last key's start, whichever is later.
func longestGap(res *loadResult) time.Duration {
	prev, gap := res.start, time.Duration(0)
	for _, t := range res.successes {
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	if res.lastLaunch.After(prev) {
		gap = max(gap, res.lastLaunch.Sub(prev))
	}
	return gap
}

// acceptedJobs returns the distinct job ids answered 202.
func acceptedJobs(res *loadResult) []string {
	seen := map[string]bool{}
	var ids []string
	for _, k := range res.keys {
		for _, a := range k.answers {
			if a.status == 202 && a.id != "" && !seen[a.id] {
				seen[a.id] = true
				ids = append(ids, a.id)
			}
		}
	}
	return ids
}

// Report is the suite's result: one row per scenario run.
type Report struct {
	Rows []*Row `json:"scenarios"`
}

// Failed reports whether any scenario broke a guarantee or did not complete.
func (rep *Report) Failed() bool {
	for _, r := range rep.Rows {
		if r.Failed() {
			return true
		}
	}
	return false
}

// WriteJSON writes the report as JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes the report as one aligned table, then a line for
// each broken guarantee and each error.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tkeys\tre-runs\tsame token\tlower token\tnot rising\tsplit answers\tanswered, re-run\tlost keys\tlost jobs\tdouble deliveries\terrors (before fault)\terror span\tunavailable\trecovery\ttakeover\thistory\tverdict\t")
	for _, r := range rep.Rows {
		lostJobs := "-"
		if r.LostJobs != nil {
			lostJobs = fmt.Sprintf("%d/%d", *r.LostJobs, *r.AcceptedJobs)
		}
		verdict := "ok"
		switch {
		case r.Error != "":
			verdict = "ERROR"
		case len(r.Broken) > 0:
			verdict = "BROKEN"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%d (%d)\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Keys,
			count(r.Reruns), count(r.SameTokenReruns), count(r.LowerTokenAfterHigher), count(r.TokensNotRising),
			r.SplitAnswers, count(r.AnsweredThenRerun), r.LostKeys, lostJobs, count(r.DoubleDeliveries),
			r.ClientErrors, r.ErrorsBeforeFault, seconds(&r.ErrorSpanMS), seconds(&r.UnavailableMS),
			seconds(r.RecoveryMS), seconds(r.TakeoverMS), count(r.HistoryViolations), verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if len(r.Broken) > 0 {
			fmt.Fprintf(w, "%s: broken: %s\n", r.Scenario, strings.Join(r.Broken, "; "))
		}
		if r.Error != "" {
			fmt.Fprintf(w, "%s: error: %s\n", r.Scenario, r.Error)
		}
		if r.History != "" {
			fmt.Fprintf(w, "%s: history: %s", r.Scenario, r.History)
		}
	}
	return nil
}

func count(v *int) string {
	if v == nil {
		return "-"
	}
	return strconv.Itoa(*v)
}

// seconds shows milliseconds as seconds, "-" when not measured.
func seconds(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs", float64(*ms)/1000)
}
