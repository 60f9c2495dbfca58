package lincheck_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/lincheck"
)

// counter is a model that is not monotone: a read of 2 is explained only
// with both increments before it.
func counter() lincheck.Model {
	return lincheck.Model{
		Name: "counter",
		Init: func() any { return 0 },
		Step: func(state, input, output any) (bool, any) {
			n := state.(int)
			if input == "inc" {
				return output == n+1, n + 1
			}
			return output == n, n
		},
		Describe: func(input, output any) string { return fmt.Sprintf("%v → %v", input, output) },
		ReadOnly: func(input, _ any) bool { return input == "read" },
	}
}

// TestTrimKeepsWhatTheVerdictNeeds: for a model that is not monotone,
// the short history keeps the operations that change the state, so it is
// a witness of the original's violation and not of one of its own (the
// second increment alone, "inc → 2", would break the model too).
func TestTrimKeepsWhatTheVerdictNeeds(t *testing.T) {
	op := func(c int, in string, out int, from, to int) lincheck.Operation {
		return lincheck.Operation{Client: c, Key: "k", Input: in, Output: out, Call: at(from), Return: at(to)}
	}
	ops := []lincheck.Operation{
		op(0, "inc", 1, 0, 10),
		op(1, "read", 1, 12, 14),
		op(0, "inc", 2, 20, 30),
		op(1, "read", 2, 32, 34),
		op(1, "read", 1, 40, 50), // stale: after the read of 2
		op(0, "inc", 3, 60, 70),  // after a quiet moment: cut
		op(1, "read", 3, 80, 90),
	}
	res := lincheck.Check(counter(), ops, 5*time.Second)
	if res.Ok() {
		t.Fatalf("a stale read was explained:\n%s", res)
	}
	got := res.Violations[0].History
	want := []string{"inc", "inc", "read"}
	if len(got) != len(want) {
		t.Fatalf("short history = %d operations, want the two increments and the stale read:\n%s", len(got), res)
	}
	for i, w := range want {
		if got[i].Input != w {
			t.Fatalf("short history op %d = %v, want %s:\n%s", i, got[i].Input, w, res)
		}
	}
	if got[2].Output != 1 {
		t.Fatalf("short history ends with %v, want the stale read of 1:\n%s", got[2].Output, res)
	}
}
