package flowlimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/flowlimit"
)

// commandCount counts the commands a client sends, by name, pipelined
// ones included.
type commandCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCount) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.n[cmd.Name()]++
	}
}

func (c *commandCount) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *commandCount) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = map[string]int{}
}

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

// TestBusiestReadsWhatTopNeeds: the admin endpoint's read grows with how
// many values it is asked for, not with the index: asked for one of 20
// values, it reads the keys of BusiestWindow of them, the most recently
// used, and answers the busiest of those. It used to read every value the
// index kept (up to 1000), whatever it was asked for.
func TestBusiestReadsWhatTopNeeds(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	count := &commandCount{n: map[string]int{}}
	rdb.AddHook(count)
	l := flowlimit.New(rdb, flowlimit.Options{Prefix: testkit.Prefix()})
	const values = 20
	for i := range values {
		// One take per value, in order: acct-19 is the most recently used.
		rule := flowlimit.Rule{Name: "ship-api", Value: fmt.Sprintf("acct-%d", i), Concurrency: 2}
		h := mustTake(t, l, "job_"+rule.Value, time.Minute, rule)
		if i != values-2 {
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Millisecond) // the index is scored in ms
	}
	count.reset()
	usage, err := l.Busiest(t.Context(), "ship-api", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 || usage[0].Value != "acct-18" || len(usage[0].Holders) != 1 {
		t.Fatalf("Busiest(1) = %+v, want acct-18, which holds a slot", usage)
	}
	if got := count.get("get"); got != flowlimit.BusiestWindow {
		t.Errorf("Busiest(1) read the rate state of %d values, want %d of %d", got, flowlimit.BusiestWindow, values)
	}
	count.reset()
	if usage, err := l.Busiest(t.Context(), "ship-api", 1000); err != nil || len(usage) != values {
		t.Fatalf("Busiest(1000) = %d values, %v; want all %d", len(usage), err, values)
	}
	if got := count.get("get"); got != values {
		t.Errorf("Busiest(1000) read %d values, want the %d there are", got, values)
	}
}

// TestLongValuesAreShortened: a key value past MaxValueBytes names its
// budget by its first bytes and a digest, so a payload's size never
// reaches a Redis key name or the index; distinct long values keep
// distinct budgets.
func TestLongValuesAreShortened(t *testing.T) {
	t.Parallel()
	exact := strings.Repeat("a", flowlimit.MaxValueBytes)
	if got := flowlimit.ShortValue(exact); got != exact {
		t.Errorf("a value of MaxValueBytes became %q", got)
	}
	long1, long2 := strings.Repeat("b", 100_000)+"1", strings.Repeat("b", 100_000)+"2"
	s1, s2 := flowlimit.ShortValue(long1), flowlimit.ShortValue(long2)
	if s1 == s2 || !strings.HasPrefix(s1, strings.Repeat("b", flowlimit.MaxValueBytes)+"~") || len(s1) != flowlimit.MaxValueBytes+1+32 {
		t.Errorf("ShortValue: %q and %q", s1, s2)
	}
	// A cut never splits a character.
	if s := flowlimit.ShortValue(strings.Repeat("a", flowlimit.MaxValueBytes-1) + strings.Repeat("é", 10)); !strings.HasPrefix(s, strings.Repeat("a", flowlimit.MaxValueBytes-1)+"~") {
		t.Errorf("ShortValue split a character: %q", s)
	}

	l := newLimiter(t)
	one := flowlimit.Rule{Name: "ship-api", Value: long1, Concurrency: 1}
	two := flowlimit.Rule{Name: "ship-api", Value: long2, Concurrency: 1}
	mustTake(t, l, "job_1", time.Minute, one)
	mustTake(t, l, "job_2", time.Minute, two)
	_, err := l.Take(t.Context(), "job_3", time.Minute, []flowlimit.Rule{one})
	if ref := refusal(t, err); ref.Value != s1 {
		t.Errorf("refused %q, want the short value %q", ref.Value, s1)
	}
	usage, err := l.Busiest(t.Context(), "ship-api", 10)
	if err != nil || len(usage) != 2 || usage[0].Value == usage[1].Value || len(usage[0].Holders) != 1 || len(usage[1].Holders) != 1 {
		t.Fatalf("Busiest = %+v, %v; want both values, one holder each", usage, err)
	}
	for _, u := range usage {
		if u.Value != s1 && u.Value != s2 {
			t.Errorf("Busiest shows %.100q, want a short value", u.Value)
		}
	}
}
