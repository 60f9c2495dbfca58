package chaos

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/lincheck"
)

// TestMeasure checks each count on hand-made outcomes, so that a fault
// the suite reports is one that happened, and one that happened is reported.
func TestMeasure(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ok := func(id string, s float64) answer { return answer{status: 201, id: id, at: at(s)} }
	res := &loadResult{
		start:      t0,
		lastLaunch: at(9),
		keys: []keyResult{
			{key: "same", answers: []answer{ok("ch_1", 1), ok("ch_1", 2), ok("ch_1", 2)}},
			{key: "split", answers: []answer{ok("ch_2", 1), ok("ch_3", 6)}},
			{key: "lost"},
			{key: "refused", answers: []answer{{status: 422, at: at(1)}, ok("ch_4", 1)}},
		},
		successes: []time.Time{at(1), at(2), at(6), at(7)},
	}
	app := func(token int64, s float64) Application { return Application{Token: token, At: at(s)} }
	applied := map[string][]Application{
		"once":       {app(1, 1)},
		"taken-over": {app(1, 1), app(2, 5)},            // a re-run, tokens rising
		"same-token": {app(1, 1), app(1, 5)},            // a re-run the upstream could not refuse
		"stale":      {app(1, 1), app(2, 2), app(1, 3)}, // a lower token after a higher one
		"rewound":    {app(3, 1), app(4, 2), app(2, 5)}, // tokens after the fault below those before it
		"all-after":  {app(1, 5), app(2, 6)},            // nothing before the fault: rising
		"all-before": {app(1, 1), app(1, 2), app(2, 3)}, // same token, nothing after
		"equal":      {app(2, 1), app(2, 5)},            // same token across the fault
	}
	r := &Row{Scenario: "redis-store-loss"}
	r.measure(res, applied, at(4), map[string]bool{"job_1": true, "job_2": false})

	want := map[string]int{
		"keys": 4, "reruns": 7, "same token": 4, "lower token": 2, "not rising": 3,
		"split": 1, "lost keys": 1, "accepted": 2, "lost jobs": 1,
	}
	got := map[string]int{
		"keys": r.Keys, "reruns": *r.Reruns, "same token": *r.SameTokenReruns, "lower token": *r.LowerTokenAfterHigher,
		"not rising": *r.TokensNotRising, "split": r.SplitAnswers, "lost keys": r.LostKeys,
		"accepted": *r.AcceptedJobs, "lost jobs": *r.LostJobs,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %d, want %d", k, got[k], w)
		}
	}
	// The longest stretch without a 2xx: from 2s to 6s.
	if r.UnavailableMS != 4000 {
		t.Errorf("unavailable = %dms, want 4000", r.UnavailableMS)
	}
	// redis-store-loss promises no same token, no lower token and rising
	// tokens; it promises nothing about re-runs, jobs or split answers
	// (the records went with Redis' data).
	// The history check sees the five keys whose tokens do not rise.
	for _, b := range []string{"same token (4)", "lower token after a higher one (2)", "tokens rise across the loss (3)", "0 history violations (5)"} {
		if !strings.Contains(strings.Join(r.Broken, "; "), b) {
			t.Errorf("broken = %q, want it to name %q", r.Broken, b)
		}
	}
	if len(r.Broken) != 4 {
		t.Errorf("broken = %q, want 4 guarantees", r.Broken)
	}
}

// TestMeasureHistory: the clients' exchanges and the upstream's
// applications are checked against the key model, with the answers rule
// where the split-answer guarantee holds and without it where it does not.
func TestMeasureHistory(t *testing.T) {
	load := func() (*loadResult, map[string][]Application) {
		t0 := time.Now()
		at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
		res := &loadResult{start: t0, lastLaunch: at(0), history: lincheck.NewRecorder()}
		exchange := func(c int, from, to int, status int, id string) {
			res.history.Add(lincheck.Operation{Client: c, Key: "k", Input: lincheck.Request{}, Output: lincheck.Answer{Status: status, ID: id}, Call: at(from), Return: at(to)})
		}
		exchange(0, 0, 100, 201, "ch_1")
		exchange(1, 0, 50, 503, "")
		exchange(1, 300, 400, 201, "ch_2") // the record was lost: a second answer
		applied := map[string][]Application{"k": {{Token: 5, At: at(10)}, {Token: 1_000_000, At: at(310)}}}
		return res, applied
	}
	for _, tc := range []struct {
		scenario   string
		violations int
	}{{"gateway-sigkill", 1}, {"redis-store-loss", 0}} {
		res, applied := load()
		r := &Row{Scenario: tc.scenario}
		r.measure(res, applied, time.Time{}, nil)
		if r.HistoryViolations == nil || *r.HistoryViolations != tc.violations {
			t.Errorf("%s: history violations = %v, want %d", tc.scenario, count(r.HistoryViolations), tc.violations)
		}
		if tc.violations > 0 && (!strings.Contains(r.History, "ch_1") || !strings.Contains(r.History, "ch_2")) {
			t.Errorf("%s: the reported history does not show the two answers:\n%s", tc.scenario, r.History)
		}
	}
}

// TestGapToLastLaunch: keys still starting after the last 2xx extend the
// outage to the last start.
func TestGapToLastLaunch(t *testing.T) {
	t0 := time.Now()
	res := &loadResult{start: t0, lastLaunch: t0.Add(8 * time.Second), successes: []time.Time{t0.Add(time.Second)}}
	if got := longestGap(res); got != 7*time.Second {
		t.Errorf("longestGap = %s, want 7s", got)
	}
}

func TestGuaranteesPerScenario(t *testing.T) {
	one := 1
	tests := []struct {
		scenario string
		row      Row
		broken   int
	}{
		{"pg-restart-fast", Row{Reruns: &one}, 1},
		{"gateway-sigkill", Row{Reruns: &one}, 0}, // a take-over after a crash is a re-run by design
		{"broker-wipe", Row{LostJobs: &one, AcceptedJobs: &one}, 1},
		{"pg-freeze-10s", Row{LostJobs: &one, AcceptedJobs: &one}, 0},
		{"gateway-sigstop", Row{SplitAnswers: 1}, 1},
		{"redis-store-loss", Row{TokensNotRising: &one}, 1},
		{"redis-store-loss", Row{SplitAnswers: 1}, 0}, // the records went with Redis' data: a documented limit
		{"pg-stop-8s", Row{TokensNotRising: &one}, 0},
		{"worker-sigkill", Row{SameTokenReruns: &one, LowerTokenAfterHigher: &one}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			tt.row.Scenario = tt.scenario
			if got := check(&tt.row); len(got) != tt.broken {
				t.Errorf("check = %q, want %d broken", got, tt.broken)
			}
		})
	}
}

func TestTable(t *testing.T) {
	zero, lost, accepted := 0, 3, 60
	rep := &Report{Rows: []*Row{
		{Scenario: "broker-wipe", Keys: 60, Reruns: &zero, SameTokenReruns: &zero, LowerTokenAfterHigher: &zero, TokensNotRising: &zero,
			AcceptedJobs: &accepted, LostJobs: &lost, Broken: []string{"0 lost accepted jobs (3)"}},
		{Scenario: "pg-stop-8s", Keys: 60, Error: "fault: pg_ctl stop: exit status 1"},
	}}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3/60", "BROKEN", "ERROR", "broker-wipe: broken: 0 lost accepted jobs (3)", "pg-stop-8s: error: fault: pg_ctl stop"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if !rep.Failed() {
		t.Error("Failed() = false with a broken guarantee")
	}
}
