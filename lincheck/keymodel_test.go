package lincheck_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/lincheck"
)

// at is a point in a test's history, ms after t0.
var t0 = time.Now()

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func request(client int, key string, from, to int, status int, id string) lincheck.Operation {
	return lincheck.Operation{Client: client, Key: key, Input: lincheck.Request{}, Output: lincheck.Answer{Status: status, ID: id}, Call: at(from), Return: at(to)}
}

func apply(key string, ms int, token int64) lincheck.Operation {
	return lincheck.Operation{Client: -1, Key: key, Input: lincheck.Apply{Token: token}, Call: at(ms), Return: at(ms)}
}

var both = lincheck.KeyRules{Answers: true, Tokens: true}

func TestKeyModelAcceptsRetriesAndReplays(t *testing.T) {
	ops := []lincheck.Operation{
		request(0, "a", 0, 50, 503, ""),
		apply("a", 10, 7),
		request(1, "a", 5, 60, 409, ""),
		request(0, "a", 60, 120, 201, "ch_1"),
		request(1, "a", 70, 130, 201, "ch_1"),
		request(2, "a", 0, 300, 0, ""),
		// A lease lost: the key runs again with a higher token; the
		// clients still get one answer, the one stored first.
		apply("a", 200, 1_000_000),
		request(2, "a", 310, 320, 201, "ch_1"),
		apply("b", 5, 3),
		request(0, "b", 0, 20, 202, "job_1"),
	}
	if res := lincheck.Check(lincheck.KeyModel(both), ops, 5*time.Second); !res.Ok() {
		t.Fatalf("a correct history was refused:\n%s", res)
	}
}

func TestKeyModelSplitAnswer(t *testing.T) {
	ops := []lincheck.Operation{
		request(0, "a", 0, 50, 201, "ch_1"),
		apply("a", 10, 7),
		request(1, "a", 5, 40, 503, ""),
		request(1, "a", 60, 90, 409, ""),
		apply("a", 100, 9),
		request(1, "a", 95, 140, 201, "ch_2"),
		request(2, "a", 150, 160, 201, "ch_1"),
		request(0, "ok", 0, 10, 201, "ch_3"),
	}
	res := lincheck.Check(lincheck.KeyModel(both), ops, 5*time.Second)
	if res.Ok() || len(res.Violating) != 1 || res.Violating[0] != "a" {
		t.Fatalf("a split answer was not found, or not only on key a:\n%s", res)
	}
	v := res.Violations[0]
	// The two different answers are enough to show it.
	if len(v.History) != 2 {
		t.Errorf("shortest history has %d operations, want the 2 answers:\n%s", len(v.History), v.Text)
	}
	if !strings.Contains(v.Text, "ch_1") || !strings.Contains(v.Text, "ch_2") {
		t.Errorf("the history does not show both answers:\n%s", v.Text)
	}
	t.Logf("reported:\n%s", res)

	// With the answers rule off (a store documented to lose records) the
	// same history is accepted: its tokens rise.
	if res := lincheck.Check(lincheck.KeyModel(lincheck.KeyRules{Tokens: true}), ops, 5*time.Second); !res.Ok() {
		t.Errorf("tokens only: refused a history whose tokens rise:\n%s", res)
	}
}

func TestKeyModelTokens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tokens  []int64
		violate bool
	}{
		{"rising", []int64{1, 2, 1_700_000_000_000_000}, false},
		{"same token twice", []int64{5, 5}, true},
		{"lower after higher", []int64{1_700_000_000_000_000, 2}, true},
		{"no token twice", []int64{0, 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ops []lincheck.Operation
			for i, tok := range tc.tokens {
				ops = append(ops, apply("k", 10*i, tok), request(i, "k", 10*i, 10*i+5, 503, ""))
			}
			res := lincheck.Check(lincheck.KeyModel(both), ops, 5*time.Second)
			if res.Ok() == tc.violate {
				t.Fatalf("violation = %v, want %v:\n%s", !res.Ok(), tc.violate, res)
			}
			if tc.violate && len(res.Violations[0].History) != 2 {
				t.Errorf("shortest history: %d operations, want the 2 applications:\n%s", len(res.Violations[0].History), res)
			}
		})
	}
}

func TestRecorderConcurrent(t *testing.T) {
	rec := lincheck.NewRecorder()
	done := make(chan struct{})
	for c := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 50 {
				end := rec.Begin(c, "k", lincheck.Request{})
				end(lincheck.Answer{Status: 201, ID: "ch_1"})
			}
		}()
	}
	for range 8 {
		<-done
	}
	ops := rec.Operations()
	if len(ops) != 400 {
		t.Fatalf("recorded %d operations, want 400", len(ops))
	}
	for _, op := range ops {
		if op.Return.Before(op.Call) {
			t.Fatalf("an operation returned before its call: %+v", op)
		}
	}
	if res := lincheck.Check(lincheck.KeyModel(both), ops, 5*time.Second); !res.Ok() {
		t.Fatalf("%s", res)
	}
}
