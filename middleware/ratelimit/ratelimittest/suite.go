package ratelimittest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter"
)

// NewStore returns a new store whose limit is tokens per interval and
// which shares no bucket with any store made before (a prefix of its own,
// or memory of its own). It closes the store when t ends; the suite may
// close it first.
type NewStore func(t *testing.T, tokens uint64, interval time.Duration) limiter.Store

// Option changes what Run checks.
type Option func(*options)

type options struct {
	maxTokens uint64
}

// MaxTokens is the largest budget the store accepts. LargeBudgets checks
// it, and budgets between, exactly. Default 2^53, the largest integer a
// Lua number (redislimit's arithmetic) holds exactly.
func MaxTokens(n uint64) Option {
	return func(o *options) { o.maxTokens = n }
}

// Run runs every conformance test against stores made by newStore, each
// subtest with stores and keys of its own.
func Run(t *testing.T, newStore NewStore, opts ...Option) {
	t.Helper()
	o := options{maxTokens: 1 << 53}
	for _, opt := range opts {
		opt(&o)
	}
	tests := []struct {
		name string
		fn   func(*testing.T, NewStore, options)
	}{
		{"TakeWithinBudget", testTakeWithinBudget},
		{"RefusedPastBudget", testRefusedPastBudget},
		{"Rollover", testRollover},
		{"LargeBudgets", testLargeBudgets},
		{"KeysIsolated", testKeysIsolated},
		{"ConcurrentTakes", testConcurrentTakes},
		{"Get", testGet},
		{"Set", testSet},
		{"Burst", testBurst},
		{"BurstLastsOneInterval", testBurstLastsOneInterval},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore, o)
		})
	}
}

const (
	// long is an interval no test outlives, so its takes share one.
	long = time.Hour
	// short is an interval a test waits out.
	short = 200 * time.Millisecond
	// clockSlack is how far a store's reset may stray from the test's
	// clock: the store may read another clock (Redis's TIME) on this host.
	clockSlack = 2 * time.Second
	// waitFor bounds every wait for an interval to end; generous on
	// purpose, it only stops a broken store.
	waitFor = 15 * time.Second
	// pollEvery spaces the takes of a test waiting for an interval to end.
	pollEvery = 10 * time.Millisecond
)

// taken is what one Take returned.
type taken struct {
	tokens, remaining uint64
	reset             time.Time
	ok                bool
}

func (k taken) String() string {
	return fmt.Sprintf("{ok %t, limit %d, %d left, reset %s}", k.ok, k.tokens, k.remaining, k.reset.Format(time.RFC3339Nano))
}

func mustTake(t *testing.T, s limiter.Store, key string) taken {
	t.Helper()
	tokens, remaining, reset, ok, err := s.Take(t.Context(), key)
	if err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	return taken{tokens, remaining, time.Unix(0, int64(reset)), ok}
}

// mustGet returns Get's limit and remaining tokens.
func mustGet(t *testing.T, s limiter.Store, key string) [2]uint64 {
	t.Helper()
	tokens, remaining, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return [2]uint64{tokens, remaining}
}

// newKey is a key no other test uses, for stores that share a backend.
func newKey() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "tenant-" + hex.EncodeToString(b)
}

// testTakeWithinBudget: the whole budget is granted, each take one less,
// all in one interval that ends an interval after the first take.
func testTakeWithinBudget(t *testing.T, newStore NewStore, _ options) {
	const tokens = 5
	s, key := newStore(t, tokens, long), newKey()
	before := time.Now()
	first := mustTake(t, s, key)
	after := time.Now()
	if lo, hi := before.Add(long-clockSlack), after.Add(long+clockSlack); first.reset.Before(lo) || first.reset.After(hi) {
		t.Errorf("reset %s, want an interval after the first take (%s..%s)", first.reset, lo, hi)
	}
	for i := range uint64(tokens) {
		got := first
		if i > 0 {
			got = mustTake(t, s, key)
		}
		if want := (taken{tokens, tokens - 1 - i, first.reset, true}); got != want {
			t.Fatalf("take %d = %+v, want %+v", i+1, got, want)
		}
	}
}

// testRefusedPastBudget: past the budget every take is refused with the
// limit, nothing left and the interval's reset, and takes nothing.
func testRefusedPastBudget(t *testing.T, newStore NewStore, _ options) {
	const tokens = 2
	s, key := newStore(t, tokens, long), newKey()
	var last taken
	for range tokens {
		last = mustTake(t, s, key)
	}
	for i := range 3 {
		if got, want := mustTake(t, s, key), (taken{tokens, 0, last.reset, false}); got != want {
			t.Fatalf("take %d past the budget = %+v, want %+v", i+1, got, want)
		}
	}
	if got := mustGet(t, s, key); got != [2]uint64{tokens, 0} {
		t.Errorf("Get after refusals = %v, want [%d 0]", got, tokens)
	}
}

// testRollover: an interval grants the budget exactly and no more; the
// take that first reports a later reset gets a full bucket. Every check is
// per interval, so an interval that ends early in the loop (a slow
// machine) moves the test along instead of failing it.
func testRollover(t *testing.T, newStore NewStore, _ options) {
	const tokens = 3
	s, key := newStore(t, tokens, short), newKey()
	granted := map[time.Time]uint64{} // by interval (its reset)
	deadline := time.Now().Add(waitFor)
	var refused taken
	for {
		got := mustTake(t, s, key)
		if got.tokens != tokens {
			t.Fatalf("take = %+v, want limit %d", got, tokens)
		}
		if !got.ok {
			refused = got
			break
		}
		granted[got.reset]++
		if n := granted[got.reset]; got.remaining != tokens-n {
			t.Fatalf("take %d of an interval left %d, want %d", n, got.remaining, tokens-n)
		}
		if time.Now().After(deadline) {
			t.Fatal("never refused")
		}
	}
	if n := granted[refused.reset]; n != tokens || refused.remaining != 0 {
		t.Fatalf("refused %+v after %d takes in its interval, want after %d with 0 left", refused, n, tokens)
	}
	for {
		time.Sleep(pollEvery)
		got := mustTake(t, s, key)
		if got.reset.Equal(refused.reset) {
			if got != refused {
				t.Fatalf("take in a spent interval = %+v, want %+v", got, refused)
			}
		} else {
			if !got.ok || got.tokens != tokens || got.remaining != tokens-1 {
				t.Fatalf("first take of a later interval = %+v, want a full bucket (%d left)", got, tokens-1)
			}
			if got.reset.Sub(refused.reset) < short {
				t.Fatalf("next reset %s is less than an interval after %s", got.reset, refused.reset)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("bucket never refilled")
		}
	}
}

// testLargeBudgets: any budget the store accepts is counted exactly and
// refilled in full. go-limiter's memorystore refilled interval/tokens per
// interval, so above √(interval in ns) a budget shrank after the first
// interval: 1e8 per second became 10.
func testLargeBudgets(t *testing.T, newStore NewStore, o options) {
	budgets := []uint64{100_000_000, 1_000_000_000}
	if o.maxTokens > budgets[len(budgets)-1] {
		budgets = append(budgets, o.maxTokens)
	}
	for _, tokens := range budgets {
		t.Run(strconv.FormatUint(tokens, 10), func(t *testing.T) {
			t.Parallel()
			s, key := newStore(t, tokens, short), newKey()
			prev := mustTake(t, s, key)
			if !prev.ok || prev.tokens != tokens || prev.remaining != tokens-1 {
				t.Fatalf("%d per %s: first take = %+v, want ok with %d left", tokens, short, prev, tokens-1)
			}
			deadline := time.Now().Add(waitFor)
			for {
				time.Sleep(pollEvery)
				got := mustTake(t, s, key)
				if got.reset.Equal(prev.reset) {
					if want := (taken{tokens, prev.remaining - 1, prev.reset, true}); got != want {
						t.Fatalf("%d per %s: take = %+v, want %+v", tokens, short, got, want)
					}
					prev = got
				} else {
					if !got.ok || got.tokens != tokens || got.remaining != tokens-1 {
						t.Fatalf("%d per %s: first take of a later interval = %+v, want ok with %d left", tokens, short, got, tokens-1)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d per %s: the interval never ended", tokens, short)
				}
			}
		})
	}
}

// testKeysIsolated: each key has its own bucket, including keys that
// differ only in a separator, a brace (a Redis Cluster hash tag) or case.
func testKeysIsolated(t *testing.T, newStore NewStore, _ options) {
	const tokens = 2
	s, key := newStore(t, tokens, long), newKey()
	for range tokens {
		mustTake(t, s, key)
	}
	if got := mustTake(t, s, key); got.ok {
		t.Fatalf("take past the budget of %q = %+v, want refused", key, got)
	}
	for _, other := range []string{key + ":", ":" + key, "{" + key + "}", key + "}", "TENANT" + key[len("tenant"):]} {
		if got := mustGet(t, s, other); got != [2]uint64{0, 0} {
			t.Errorf("Get(%q) = %v after takes of %q, want [0 0]", other, got, key)
		}
		if got := mustTake(t, s, other); !got.ok || got.remaining != tokens-1 {
			t.Errorf("take of %q = %+v after %q spent its budget, want ok with %d left", other, got, key, tokens-1)
		}
	}
}

// testConcurrentTakes: takes at once grant the budget exactly once, each
// remaining count to one take, and refuse the rest.
func testConcurrentTakes(t *testing.T, newStore NewStore, _ options) {
	const tokens, attempts = 10, 60
	s, key := newStore(t, tokens, long), newKey()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted []taken
		refused []taken
		errs    []error
	)
	for range attempts {
		wg.Go(func() {
			tok, remaining, reset, ok, err := s.Take(t.Context(), key)
			mu.Lock()
			defer mu.Unlock()
			got := taken{tok, remaining, time.Unix(0, int64(reset)), ok}
			switch {
			case err != nil:
				errs = append(errs, err)
			case ok:
				granted = append(granted, got)
			default:
				refused = append(refused, got)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(granted) != tokens || len(refused) != attempts-tokens {
		t.Fatalf("%d takes granted and %d refused, want %d and %d", len(granted), len(refused), tokens, attempts-tokens)
	}
	var left []uint64
	for _, g := range append(granted, refused...) {
		if g.tokens != tokens || !g.reset.Equal(granted[0].reset) {
			t.Errorf("take %+v: want limit %d and reset %s", g, tokens, granted[0].reset)
		}
		if g.ok {
			left = append(left, g.remaining)
		} else if g.remaining != 0 {
			t.Errorf("refusal %+v: want 0 left", g)
		}
	}
	slices.Sort(left)
	if want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(left, want) {
		t.Errorf("remaining counts %v, want each of %v once", left, want)
	}
}

// testGet: Get reports a key's limit and what is left, changing nothing;
// a key the store does not hold is 0, 0.
func testGet(t *testing.T, newStore NewStore, _ options) {
	const tokens = 4
	s, key := newStore(t, tokens, long), newKey()
	if got := mustGet(t, s, key); got != [2]uint64{0, 0} {
		t.Errorf("Get of an unseen key = %v, want [0 0]", got)
	}
	mustTake(t, s, key)
	for range 2 {
		if got := mustGet(t, s, key); got != [2]uint64{tokens, tokens - 1} {
			t.Errorf("Get after a take = %v, want [%d %d]", got, tokens, tokens-1)
		}
	}
	if got := mustTake(t, s, key); got.remaining != tokens-2 {
		t.Errorf("take after two Gets left %d, want %d: Get must not take", got.remaining, tokens-2)
	}
}

// testSet: Set gives one key its own limit and interval, in a full
// bucket, replacing what was there; other keys keep the store's limit.
func testSet(t *testing.T, newStore NewStore, _ options) {
	const tokens = 5
	ctx := t.Context()
	s, key, other := newStore(t, tokens, time.Second), newKey(), newKey()
	if err := s.Set(ctx, key, 3, long); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, key); got != [2]uint64{3, 3} {
		t.Errorf("Get after Set(3) = %v, want [3 3]", got)
	}
	before := time.Now()
	got := mustTake(t, s, key)
	if !got.ok || got.tokens != 3 || got.remaining != 2 {
		t.Errorf("take after Set(3) = %+v, want limit 3 with 2 left", got)
	}
	if lo, hi := before.Add(long-clockSlack), time.Now().Add(long+clockSlack); got.reset.Before(lo) || got.reset.After(hi) {
		t.Errorf("reset %s, want Set's interval (an hour) away: %s..%s", got.reset, lo, hi)
	}
	if err := s.Set(ctx, key, 4, long); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, key); got != [2]uint64{4, 4} {
		t.Errorf("Get after a second Set(4) = %v, want [4 4]: Set replaces the bucket with a full one", got)
	}
	if got := mustTake(t, s, other); got.tokens != tokens || got.remaining != tokens-1 {
		t.Errorf("take of another key = %+v, want the store's limit %d", got, tokens)
	}
	if err := s.Set(ctx, key, 1, 0); err == nil {
		t.Error("Set with a zero interval succeeded")
	}
}

// testBurst: Burst adds tokens to the current interval, on a key's bucket
// or on a full one for a key the store does not hold.
func testBurst(t *testing.T, newStore NewStore, _ options) {
	const tokens = 5
	ctx := t.Context()
	s, key, other := newStore(t, tokens, long), newKey(), newKey()
	mustTake(t, s, key)
	if err := s.Burst(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, key); got != [2]uint64{tokens, tokens + 1} {
		t.Errorf("Get after Burst(2) = %v, want [%d %d]", got, tokens, tokens+1)
	}
	for i := range tokens + 1 {
		if got := mustTake(t, s, key); !got.ok {
			t.Fatalf("take %d of the burst refused: %+v", i+1, got)
		}
	}
	if got := mustTake(t, s, key); got.ok || got.tokens != tokens || got.remaining != 0 {
		t.Errorf("take past the burst = %+v, want refused with limit %d, 0 left", got, tokens)
	}
	if err := s.Burst(ctx, other, 2); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, other); got != [2]uint64{tokens, tokens + 2} {
		t.Errorf("Get after Burst(2) of an unseen key = %v, want [%d %d]", got, tokens, tokens+2)
	}
}

// testBurstLastsOneInterval: the next interval starts from the limit
// again.
func testBurstLastsOneInterval(t *testing.T, newStore NewStore, _ options) {
	const tokens, extra = 2, 5
	s, key := newStore(t, tokens, short), newKey()
	first := mustTake(t, s, key)
	if err := s.Burst(t.Context(), key, extra); err != nil {
		t.Fatal(err)
	}
	got := mustTake(t, s, key)
	if got.reset.Equal(first.reset) && got.remaining != tokens+extra-2 {
		t.Errorf("take after Burst(%d) left %d, want %d", extra, got.remaining, tokens+extra-2)
	}
	burst := got.reset
	deadline := time.Now().Add(waitFor)
	for got.reset.Equal(burst) {
		if time.Now().After(deadline) {
			t.Fatal("the interval never ended")
		}
		time.Sleep(pollEvery)
		got = mustTake(t, s, key)
	}
	if !got.ok || got.remaining != tokens-1 {
		t.Errorf("first take of the interval after a burst = %+v, want %d left (the limit, no burst)", got, tokens-1)
	}
}

// testClose: after Close every call returns limiter.ErrStopped, and Take
// zero values.
func testClose(t *testing.T, newStore NewStore, _ options) {
	ctx := t.Context()
	s, key := newStore(t, 2, long), newKey()
	mustTake(t, s, key)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tokens, remaining, reset, ok, err := s.Take(ctx, key)
	if !errors.Is(err, limiter.ErrStopped) || tokens != 0 || remaining != 0 || reset != 0 || ok {
		t.Errorf("Take after Close = %d %d %d %t %v, want zeros and ErrStopped", tokens, remaining, reset, ok, err)
	}
	if _, _, err := s.Get(ctx, key); !errors.Is(err, limiter.ErrStopped) {
		t.Errorf("Get after Close: %v, want ErrStopped", err)
	}
	if err := s.Set(ctx, key, 1, time.Second); !errors.Is(err, limiter.ErrStopped) {
		t.Errorf("Set after Close: %v, want ErrStopped", err)
	}
	if err := s.Burst(ctx, key, 1); !errors.Is(err, limiter.ErrStopped) {
		t.Errorf("Burst after Close: %v, want ErrStopped", err)
	}
}
