package explain

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemgate/idemgate/openapi"
)

// WriteText writes the story for a person: the record and its claims, the
// job, every attempt, the effects, then the verdict.
func WriteText(w io.Writer, s *Story) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	if r := s.Record; r != nil {
		p("record\t%s/%s/%s: %s, token %d, status %s, lease until %s, expires %s\n", r.Tenant, r.Route, r.Key, r.State,
			r.FencingToken, statusText(r.Status), timeText(r.LeaseUntil), r.ExpiresAt.UTC().Format(time.RFC3339))
		p("\tfingerprint %s\n", r.Fingerprint)
	} else {
		p("record\tnone (expired, deleted, or never claimed)\n")
	}
	switch {
	case value(s.ClaimLedger) != "":
		p("claims\t%s\n", *s.ClaimLedger)
	case len(s.Claims) == 0:
		p("claims\tnone in the ledger\n")
	default:
		p("claims\t#\ttoken\tinstance\tclaimed\tended\toutcome\n")
		for i, c := range s.Claims {
			out := string(c.Outcome)
			if out == "" {
				out = "holding"
			}
			if c.Status != nil {
				out += " (" + strconv.Itoa(*c.Status) + ")"
			}
			if reason := value(c.Reason); reason != "" {
				out += ": " + reason
			}
			p("\t%d\t%d\t%s\t%s\t%s\t%s\n", i+1, c.FencingToken, dash(c.Instance), c.ClaimedAt.UTC().Format(stamp), timeText(c.EndedAt), out)
		}
	}
	if j := s.Job; j != nil {
		p("job\t%s %s: %s, %d attempt(s), result_ref %s\n", j.Id, j.Task, j.Status, j.Attempts, strText(j.ResultRef))
		p("\ttenant %s, business key %s, queue %s, created %s, updated %s\n", j.Tenant, j.BusinessKey, j.Queue,
			j.CreatedAt.UTC().Format(time.RFC3339), j.UpdatedAt.UTC().Format(time.RFC3339))
		if j.NotBefore != nil {
			p("\tnot before %s\n", j.NotBefore.UTC().Format(time.RFC3339Nano))
		}
		if d := j.Debounce; d != nil {
			p("\tdebounce %s: %s\n", d.Key, debounceText(d, j.Id, s.Attempts))
		}
		if state := value(j.TaskState); state != "" {
			p("\ttask %s\n", state)
		}
		if j.Error != nil {
			p("\terror %s\n", *j.Error)
		}
		if of := value(j.RerunOf); of != "" {
			p("\tre-run of %s\n", of)
		}
		if j.RerunAs != nil {
			p("\tre-run as %s\n", strings.Join(*j.RerunAs, ", "))
		}
		if e := s.Execution; e != nil {
			p("execution\t%s, %d attempt(s), token %d, result_ref %s\n", e.Status, e.Attempts, e.FencingToken, dash(e.ResultRef))
		}
		if len(s.Attempts) == 0 {
			p("attempts\tnone in the ledger\n")
		} else {
			p("attempts\ttry\tcounts as\ttoken\toutcome\tstarted\tended\tworker\terror\n")
			for _, a := range s.Attempts {
				out := string(a.Outcome)
				if out == "" {
					out = "running"
				}
				p("\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tryText(a), countsText(a), tokenText(a.FencingToken), out,
					a.StartedAt.UTC().Format(stamp), timeText(a.EndedAt), dash(a.Worker), dash(oneLine(a.Error)))
			}
		}
		switch {
		case len(s.Effects) == 0 && s.EffectsKnown:
			p("effects\tnone\n")
		case len(s.Effects) == 0:
			p("effects\tnone known: the task's effect lives where explain cannot read it (an HTTP delivery's receiver)\n")
		}
		for i, e := range s.Effects {
			label := ""
			if i == 0 {
				label = "effects"
			}
			line := e.Kind + " " + dash(e.Ref)
			if e.WrittenAt != nil {
				line += ", written " + e.WrittenAt.UTC().Format(stamp)
			}
			if detail := value(e.Detail); detail != "" {
				line += ": " + detail
			}
			switch by := value(e.JobId); {
			case e.Sibling != nil && *e.Sibling:
				line += ", written by sibling job " + by + " (not this job's)"
			case by != "":
				line += ", written by this job"
			}
			p("%s\t%s\n", label, line)
		}
		writeCallbacks(p, s)
	}
	writeActions(p, s)
	p("verdict\t%s\n", s.Verdict)
	if s.Uncertain {
		p("\tuncertain: the ledger cannot rule out an effect it does not show\n")
	}
	return tw.Flush()
}

// writeActions lists what operators did, one line each: when, who, what,
// the bulk filter and the reason.
func writeActions(p func(string, ...any), s *Story) {
	if s.Actions == nil {
		return
	}
	for i, a := range *s.Actions {
		label := ""
		if i == 0 {
			label = "actions"
		}
		line := fmt.Sprintf("%s %s by %s via %s (action %d)", a.At.UTC().Format(stamp), a.Action, a.Actor, a.Via, a.Id)
		if f := value(a.Filter); f != "" {
			line += ", filter " + f
		}
		if a.Reason != "" {
			line += ", reason: " + oneLine(a.Reason)
		}
		p("%s\t%s\n", label, line)
	}
}

// tryText numbers a ledger row: the job's own tries, or the sibling job
// that wrote it.
func tryText(a openapi.StoryAttempt) string {
	switch {
	case a.Sibling && a.JobId == "":
		return "sibling (no job)"
	case a.Sibling:
		return "sibling " + a.JobId
	}
	return "try " + strconv.Itoa(a.Try)
}

// countsText says whether a row counts as an attempt, and which.
func countsText(a openapi.StoryAttempt) string {
	var t string
	switch {
	case a.Counted || a.Sibling:
		t = "attempt " + strconv.Itoa(a.Attempt)
	case a.Outcome == "":
		t = "not counted"
	default:
		t = "not counted: " + string(a.Outcome)
	}
	if a.Replay {
		t += ", replay"
	}
	return t
}

const stamp = "2006-01-02T15:04:05.000Z"

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(stamp)
}

func tokenText(t *int64) string {
	if t == nil {
		return "-"
	}
	return strconv.FormatInt(*t, 10)
}

func statusText(st *int) string {
	if st == nil {
		return "-"
	}
	return strconv.Itoa(*st)
}

func strText(s *string) string {
	if s == nil {
		return "-"
	}
	return dash(*s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps an error on its row of the table.
func oneLine(s string) string {
	const max = 120
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r == '\n' || r == '\t' || r == '\r' {
			r = ' '
		}
		out = append(out, r)
		if len(out) >= max {
			out = append(out, '…')
			break
		}
	}
	return string(out)
}

// debounceText tells a debounced job's cycle: how many submits it folded,
// when the first and the latest arrived, and when the job ran (its first
// attempt) or may run at the latest.
func debounceText(d *openapi.StoryDebounce, id string, attempts []openapi.StoryAttempt) string {
	const clock = "15:04:05"
	out := fmt.Sprintf("coalesced %d submission", d.Coalesced)
	if d.Coalesced != 1 {
		out += "s"
	}
	out += ", first " + d.FirstAt.UTC().Format(clock) + ", last " + d.LastAt.UTC().Format(clock)
	for _, a := range attempts {
		if a.Attempt >= 1 && a.JobId == id {
			return out + ", ran at " + a.StartedAt.UTC().Format(clock)
		}
	}
	return out + ", runs by " + d.Until.UTC().Format(clock) + " at the latest"
}
