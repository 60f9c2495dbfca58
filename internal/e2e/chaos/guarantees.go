package chaos

import (
	"fmt"
	"slices"

	"github.com/idemgate/idemgate/lincheck"
)

// guarantee is one promise the suite checks: the measured value must be 0
// in each scenario it applies to.
type guarantee struct {
	name      string
	scenarios []string // nil: every scenario
	except    []string // scenarios where it is a documented limit, not a promise
	value     func(*Row) *int
}

// guarantees is the one list of what must hold under the faults; a
// scenario breaks the suite when one of them does not.
var guarantees = []guarantee{
	{name: "0 re-runs with the same token", value: func(r *Row) *int { return r.SameTokenReruns }},
	{name: "0 lower token after a higher one", value: func(r *Row) *int { return r.LowerTokenAfterHigher }},
	// With store: redis, a record lost with Redis' data is gone: the retry
	// is a new request to the gateway and runs again (with a higher token,
	// checked below). An upstream that honours the key answers as before;
	// the suite's naive one answers anew. docs/guarantees.md: "store: redis is as
	// durable as your Redis".
	// A failover to a replica that lags loses the last writes: answers
	// given from them are forgotten (the limits RELIABILITY.md tables),
	// unless the recommended settings below are on. So does a Redis
	// with the append-only file fsynced every second.
	{name: splitAnswers, except: []string{"redis-store-loss", "redis-aof-restart", "redis-failover-lag", "pg-failover-async-lag"}, value: func(r *Row) *int { return &r.SplitAnswers }},
	{name: "0 answers forgotten and run again", scenarios: recommended, value: func(r *Row) *int { return r.AnsweredThenRerun }},
	{name: "0 healthy requests refused before the fault", scenarios: recommended, value: func(r *Row) *int { return &r.ErrorsBeforeFault }},
	// The key model (package history) over every exchange and every
	// application: its answers rule is the split-answer guarantee, so it
	// is left out where that one is excepted (keyRules); its tokens rule
	// holds everywhere, a lost Redis store included.
	{name: "0 history violations", value: func(r *Row) *int { return r.HistoryViolations }},
	{name: "0 re-runs", scenarios: []string{"pg-restart-fast", "pg-restart-immediate"}, value: func(r *Row) *int { return r.Reruns }},
	{name: "0 lost accepted jobs", scenarios: []string{"broker-wipe", "broker-wipe-submit", "worker-sigkill",
		"redis-failover-sync", "redis-failover-lag-wait", "pg-failover-async", "pg-failover-sync-lag",
		"redis-partition", "pg-partition", "worker-lock-partition"}, value: func(r *Row) *int { return r.LostJobs }},
	{name: "tokens rise across the loss", scenarios: []string{"redis-store-loss"}, value: func(r *Row) *int { return r.TokensNotRising }},
}

// recommended are the failovers with a lagging replica under the settings
// the docs recommend (Sentinel with idempotency.redis_wait, a
// synchronous PostgreSQL standby), and the failovers in sync: nothing
// answered may be forgotten, and the replica's lag may not refuse
// healthy requests.
var recommended = []string{"redis-failover-sync", "redis-failover-lag-wait", "pg-failover-async", "pg-failover-sync-lag"}

const splitAnswers = "0 split answers"

// keyRules is what the key model checks in a scenario: tokens always,
// answers where the split-answer guarantee holds.
func keyRules(scenario string) lincheck.KeyRules {
	rules := lincheck.KeyRules{Answers: true, Tokens: true}
	for _, g := range guarantees {
		if g.name == splitAnswers && slices.Contains(g.except, scenario) {
			rules.Answers = false
		}
	}
	return rules
}

// check returns the guarantees r breaks, each with its measured value.
func check(r *Row) []string {
	broken := []string{}
	for _, g := range guarantees {
		if g.scenarios != nil && !slices.Contains(g.scenarios, r.Scenario) || slices.Contains(g.except, r.Scenario) {
			continue
		}
		if v := g.value(r); v != nil && *v != 0 {
			broken = append(broken, fmt.Sprintf("%s (%d)", g.name, *v))
		}
	}
	return broken
}
