package lincheck

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Model is the sequential specification of one key: the state a key
// starts in, and whether an operation with its output may follow a state
// (and to which state). Step must not mutate the state it is given, and
// states must be comparable with ==.
type Model struct {
	Name     string
	Init     func() any
	Step     func(state, input, output any) (ok bool, next any)
	Describe func(input, output any) string
	// Monotone: every part of a history the model explains is explained
	// too, so the search for a short violation may drop any operation.
	// When false, it drops only what cannot change the verdict: the
	// operations after a moment when none was in flight, and those
	// ReadOnly reports.
	Monotone bool
	// ReadOnly reports an operation that never changes the state it
	// follows; nil: none does.
	ReadOnly func(input, output any) bool
}

// keyed is a porcupine input: the model's own input with the key the
// partition groups by.
type keyed struct {
	key string
	in  any
}

// porcupine is m as porcupine's Model, partitioned by key.
func (m Model) porcupine() porcupine.Model {
	return porcupine.Model{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			var keys []string
			parts := map[string][]porcupine.Operation{}
			for _, op := range ops {
				k := op.Input.(keyed).key
				if _, ok := parts[k]; !ok {
					keys = append(keys, k)
				}
				parts[k] = append(parts[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, parts[k])
			}
			return out
		},
		Init: m.Init,
		Step: func(state, input, output any) (bool, any) {
			return m.Step(state, input.(keyed).in, output)
		},
		DescribeOperation: func(input, output any) string { return m.Describe(input.(keyed).in, output) },
	}
}

// Limits of the search for a short violating history: the greedy trim
// re-checks the key's history once per operation it tries to drop.
const (
	// maxTrimmed is how many violating keys get a trimmed history; the
	// others are counted.
	maxTrimmed = 5
	// maxTrimChecks bounds the checks of one key's trim.
	maxTrimChecks = 300
	// maxListed is how many other keys a result names.
	maxListed = 20
)

// Result is what Check found.
type Result struct {
	Model      string
	Keys       int
	Operations int
	// Violating lists every key whose history no order of its operations
	// explains, sorted.
	Violating []string
	// Violations shows the first few of them, each with its shortest
	// history found.
	Violations []Violation
	// Unchecked lists keys whose check ran out of time: neither proven
	// nor refuted.
	Unchecked []string
}

// Ok reports whether no key violated the model.
func (r Result) Ok() bool { return len(r.Violating) == 0 }

// Violation is one key's history that breaks the model.
type Violation struct {
	Key string
	// Operations is how many operations the key had; History the fewest
	// of them found that still break the model, by call time.
	Operations int
	History    []Operation
	// Text is History as lines, times from its first call, each
	// operation as the model describes it; then the longest order of
	// them the checker could explain, which the next operation breaks.
	Text string
}

// String renders the result: a summary line, then each violation's
// history.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d keys, %d operations, %d violating", r.Model, r.Keys, r.Operations, len(r.Violating))
	if len(r.Unchecked) > 0 {
		fmt.Fprintf(&b, ", %d not checked in time", len(r.Unchecked))
	}
	b.WriteString("\n")
	for _, v := range r.Violations {
		b.WriteString(v.Text)
	}
	if n := len(r.Violating) - len(r.Violations); n > 0 {
		more := r.Violating[len(r.Violations):]
		fmt.Fprintf(&b, "… and %d more violating keys: %s", n, strings.Join(more[:min(len(more), maxListed)], ", "))
		if len(more) > maxListed {
			b.WriteString(", …")
		}
		b.WriteString("\n")
	}
	if len(r.Unchecked) > 0 {
		fmt.Fprintf(&b, "not checked in time: %s", strings.Join(r.Unchecked[:min(len(r.Unchecked), maxListed)], ", "))
		if len(r.Unchecked) > maxListed {
			b.WriteString(", …")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Check checks ops against m, each key on its own, with timeout per key.
// It reports every violating key and, for the first few, the shortest
// history it finds by dropping operations one at a time while the rest
// still break the model (bounded; not necessarily the shortest there is,
// but never one that does not break it).
func Check(m Model, ops []Operation, timeout time.Duration) Result {
	pm := m.porcupine()
	var keys []string
	byKey := map[string][]Operation{}
	for _, op := range ops {
		if _, ok := byKey[op.Key]; !ok {
			keys = append(keys, op.Key)
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	slices.Sort(keys)
	res := Result{Model: m.Name, Keys: len(keys), Operations: len(ops)}
	// One check of everything first: the common case, no violation, costs
	// one pass.
	if len(ops) > 0 && porcupine.CheckOperationsTimeout(pm, convert(ops), timeout) == porcupine.Ok {
		return res
	}
	for _, k := range keys {
		switch porcupine.CheckOperationsTimeout(pm, convert(byKey[k]), timeout) {
		case porcupine.Illegal:
			res.Violating = append(res.Violating, k)
		case porcupine.Unknown:
			res.Unchecked = append(res.Unchecked, k)
		}
	}
	for _, k := range res.Violating[:min(len(res.Violating), maxTrimmed)] {
		short := trim(m, pm, byKey[k], timeout)
		res.Violations = append(res.Violations, Violation{
			Key: k, Operations: len(byKey[k]), History: short, Text: describe(m, pm, k, len(byKey[k]), short, timeout),
		})
	}
	return res
}

// convert turns ops into porcupine's, timed in nanoseconds from the
// earliest call (monotonic readings, so a wall clock step changes
// nothing).
func convert(ops []Operation) []porcupine.Operation {
	if len(ops) == 0 {
		return nil
	}
	origin := ops[0].Call
	for _, op := range ops {
		if op.Call.Before(origin) {
			origin = op.Call
		}
	}
	out := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		out[i] = porcupine.Operation{
			ClientId: op.Client, Input: keyed{op.Key, op.Input}, Output: op.Output,
			Call: int64(op.Call.Sub(origin)), Return: int64(op.Return.Sub(origin)),
		}
	}
	return out
}

// trim shortens a violating history without changing its verdict: first
// to the shortest prefix that ends at a moment no operation was in flight
// (everything before such a moment is ordered before everything after
// it, so the prefix is a history of its own), then by dropping operations
// one at a time, each only if the model allows it (Monotone, ReadOnly)
// and the rest still breaks the model.
func trim(m Model, pm porcupine.Model, ops []Operation, timeout time.Duration) []Operation {
	short := append([]Operation(nil), ops...)
	slices.SortStableFunc(short, func(a, b Operation) int { return a.Call.Compare(b.Call) })
	checks := 0
	illegal := func(h []Operation) bool {
		checks++
		return len(h) > 0 && porcupine.CheckOperationsTimeout(pm, convert(h), timeout) == porcupine.Illegal
	}
	var last time.Time
	for i := 0; i < len(short)-1 && checks < maxTrimChecks; i++ {
		if short[i].Return.After(last) {
			last = short[i].Return
		}
		if last.Before(short[i+1].Call) && illegal(short[:i+1]) {
			short = short[:i+1]
			break
		}
	}
	// From the end: the operations after the violation are the likeliest
	// to be irrelevant.
	for i := len(short) - 1; i >= 0 && checks < maxTrimChecks; i-- {
		if !m.Monotone && (m.ReadOnly == nil || !m.ReadOnly(short[i].Input, short[i].Output)) {
			continue
		}
		if candidate := slices.Delete(slices.Clone(short), i, i+1); illegal(candidate) {
			short = candidate
		}
	}
	return short
}

// describe renders a violating history and the longest order of it the
// checker could explain.
func describe(m Model, pm porcupine.Model, key string, total int, ops []Operation, timeout time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: %d of its %d operations break the model:\n", key, len(ops), total)
	origin := ops[0].Call
	for _, op := range ops {
		fmt.Fprintf(&b, "  [%s, %s] client %d: %s\n", offset(op.Call.Sub(origin)), offset(op.Return.Sub(origin)), op.Client, m.Describe(op.Input, op.Output))
	}
	_, info := porcupine.CheckOperationsVerbose(pm, convert(ops), timeout)
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	if len(longest) > 0 {
		steps := make([]string, len(longest))
		for i, op := range longest {
			steps[i] = pm.DescribeOperation(op.Input, op.Output)
		}
		fmt.Fprintf(&b, "  longest explained order: %s; no remaining operation can follow it\n", strings.Join(steps, " → "))
	} else {
		b.WriteString("  no operation can come first\n")
	}
	return b.String()
}

func offset(d time.Duration) string {
	return fmt.Sprintf("+%.3fs", d.Seconds())
}
