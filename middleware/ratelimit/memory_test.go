package ratelimit_test

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/ratelimit/ratelimittest"
)

// newClock is a test's time, moved by hand.
func newClock() *testkit.Clock { return testkit.NewClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)) }

func newMemory(t *testing.T, c ratelimit.MemoryConfig) *ratelimit.Memory {
	t.Helper()
	m, err := ratelimit.NewMemory(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

type taken struct {
	tokens, remaining uint64
	reset             time.Time
	ok                bool
}

func takeOne(t *testing.T, s limiter.Store, key string) taken {
	t.Helper()
	tokens, remaining, reset, ok, err := s.Take(t.Context(), key)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return taken{tokens, remaining, time.Unix(0, int64(reset)).UTC(), ok}
}

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	ratelimittest.Run(t, func(t *testing.T, tokens uint64, interval time.Duration) limiter.Store {
		return newMemory(t, ratelimit.MemoryConfig{Tokens: tokens, Interval: interval})
	}, ratelimittest.MaxTokens(math.MaxUint64))
}

// TestMemoryWindows checks the arithmetic on a test clock, for budgets
// from 1 to 2^64-1 per interval and intervals from 1ms to 24h: the whole
// budget in each interval, a refill exactly when it ends, intervals on
// the grid their first take started.
func TestMemoryWindows(t *testing.T) {
	t.Parallel()
	for _, tokens := range []uint64{1, 3, 1000, 100_000_000, 1_000_000_000, 1 << 62, math.MaxUint64} {
		for _, interval := range []time.Duration{time.Millisecond, time.Second, time.Minute, 24 * time.Hour} {
			clk := newClock()
			// IdleTTL past the test: a swept bucket would start a new grid.
			m := newMemory(t, ratelimit.MemoryConfig{Tokens: tokens, Interval: interval, IdleTTL: 1000 * time.Hour, Now: clk.Now})
			t0 := clk.Now()
			want := func(step string, got taken, ok bool, remaining uint64, reset time.Time) {
				t.Helper()
				if got.ok != ok || got.tokens != tokens || got.remaining != remaining || !got.reset.Equal(reset) {
					t.Fatalf("%d per %s, %s: %+v; want ok %v, %d left, reset %s", tokens, interval, step, got, ok, remaining, reset)
				}
			}
			want("first take", takeOne(t, m, "acme"), true, tokens-1, t0.Add(interval))
			clk.Add(interval - 1)
			if tokens > 1 {
				want("last instant of the interval", takeOne(t, m, "acme"), true, tokens-2, t0.Add(interval))
			} else {
				want("last instant of the interval", takeOne(t, m, "acme"), false, 0, t0.Add(interval))
			}
			clk.Add(1)
			want("next interval", takeOne(t, m, "acme"), true, tokens-1, t0.Add(2*interval))
			clk.Add(interval + interval/2)
			want("an interval skipped", takeOne(t, m, "acme"), true, tokens-1, t0.Add(3*interval))
		}
	}
}

// TestSmallBudgetIsExact: 3 per second is 3, then refusals until the
// second ends, then 3 again — through the middleware, with its headers.
func TestSmallBudgetIsExact(t *testing.T) {
	t.Parallel()
	clk := newClock()
	next := &okHandler{}
	lim := newLimiter(t, ratelimit.Limits{"acme": {Tokens: 3, Interval: 10 * time.Second}}, func(l ratelimit.Limit) (limiter.Store, error) {
		return ratelimit.NewMemory(ratelimit.MemoryConfig{Tokens: l.Tokens, Interval: l.Interval, Now: clk.Now})
	}, ratelimit.Config{Now: clk.Now})
	h := lim.Wrap(next)
	expect := func(step string, code int, remaining int64, reset string) {
		t.Helper()
		w := get(h, "acme")
		if w.Code != code || headerInt(t, w, ratelimit.HeaderRemaining) != remaining ||
			w.Header().Get(ratelimit.HeaderReset) != reset || headerInt(t, w, ratelimit.HeaderLimit) != 3 {
			t.Fatalf("%s: %d, RateLimit-Limit %s, -Remaining %s, -Reset %s; want %d, 3, %d, %s", step, w.Code,
				w.Header().Get(ratelimit.HeaderLimit), w.Header().Get(ratelimit.HeaderRemaining), w.Header().Get(ratelimit.HeaderReset),
				code, remaining, reset)
		}
		retry := w.Header().Get(ratelimit.HeaderRetryAfter)
		if (code == http.StatusTooManyRequests) != (retry == reset) {
			t.Fatalf("%s: Retry-After %q with status %d", step, retry, code)
		}
	}
	for i := range 3 {
		expect("request "+string(rune('1'+i)), http.StatusOK, int64(2-i), "10")
	}
	expect("fourth", http.StatusTooManyRequests, 0, "10")
	clk.Add(2500 * time.Millisecond)
	expect("later in the interval", http.StatusTooManyRequests, 0, "8")
	clk.Add(7500*time.Millisecond - time.Nanosecond)
	expect("its last instant", http.StatusTooManyRequests, 0, "1")
	clk.Add(time.Nanosecond)
	for i := range 3 {
		expect("next interval "+string(rune('1'+i)), http.StatusOK, int64(2-i), "10")
	}
	expect("next interval, fourth", http.StatusTooManyRequests, 0, "10")
	if n := next.calls.Load(); n != 6 {
		t.Errorf("handler ran %d times, want 6", n)
	}
}

// TestMemoryBurstCapped: a burst past 2^64 tokens leaves the count at
// 2^64-1 instead of wrapping around to a few.
func TestMemoryBurstCapped(t *testing.T) {
	t.Parallel()
	m := newMemory(t, ratelimit.MemoryConfig{Tokens: 2, Interval: time.Minute})
	ctx := t.Context()
	takeOne(t, m, "acme")
	if err := m.Burst(ctx, "acme", math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if tokens, remaining, err := m.Get(ctx, "acme"); err != nil || tokens != 2 || remaining != math.MaxUint64 {
		t.Errorf("Get after a burst past 2^64 = %d, %d, %v; want 2, 2^64-1", tokens, remaining, err)
	}
}

// TestMemorySweep: a bucket idle for IdleTTL after its interval is
// forgotten; one still in use is kept.
func TestMemorySweep(t *testing.T) {
	t.Parallel()
	clk := newClock()
	m := newMemory(t, ratelimit.MemoryConfig{Tokens: 5, Interval: time.Hour, IdleTTL: 2 * time.Hour, Now: clk.Now})
	ctx := t.Context()
	takeOne(t, m, "idle")
	clk.Add(2 * time.Hour)
	takeOne(t, m, "busy")
	if tokens, _, _ := m.Get(ctx, "idle"); tokens != 5 {
		t.Fatal("swept a bucket whose interval ended only an hour ago")
	}
	clk.Add(time.Hour)
	takeOne(t, m, "busy") // sweeps
	if tokens, remaining, _ := m.Get(ctx, "idle"); tokens != 0 || remaining != 0 {
		t.Errorf("idle bucket still held: %d, %d", tokens, remaining)
	}
	if tokens, remaining, _ := m.Get(ctx, "busy"); tokens != 5 || remaining != 4 {
		t.Errorf("busy bucket: %d, %d; want 5, 4 (refilled, one taken)", tokens, remaining)
	}
}

func TestNewMemoryValidates(t *testing.T) {
	t.Parallel()
	for _, c := range []ratelimit.MemoryConfig{{Interval: -time.Second}, {IdleTTL: -1}} {
		if _, err := ratelimit.NewMemory(c); err == nil {
			t.Errorf("NewMemory(%+v) succeeded", c)
		}
	}
}
