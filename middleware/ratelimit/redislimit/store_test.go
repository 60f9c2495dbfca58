package redislimit_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/ratelimit/redislimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backends are the Redis deployments every integration test runs against.
// Each call returns a new client, as a separate gateway instance would
// have; a backend whose variable is unset skips.
var backends = []struct {
	name   string
	client func(testing.TB) redis.UniversalClient
}{
	{"single", func(t testing.TB) redis.UniversalClient { return testenv.Redis(t) }},
	{"cluster", func(t testing.TB) redis.UniversalClient { return testenv.RedisCluster(t) }},
}

func forEachBackend(t *testing.T, test func(t *testing.T, client func(testing.TB) redis.UniversalClient)) {
	t.Helper()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			test(t, be.client)
		})
	}
}

func newStore(t testing.TB, client redis.UniversalClient, c redislimit.Config) *redislimit.Store {
	t.Helper()
	s, err := redislimit.New(client, &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// newLimiter is the middleware on rdb under prefix, keyed by the
// X-Test-Tenant header; a store error fails the test. It hands each store
// it makes to made, when set.
func newLimiter(t *testing.T, rdb redis.UniversalClient, prefix string, limits ratelimit.Limits, made func(*redislimit.Store)) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(limits, func(l ratelimit.Limit) (limiter.Store, error) {
		s, err := redislimit.New(rdb, &redislimit.Config{Tokens: l.Tokens, Interval: l.Interval, Prefix: prefix})
		if made != nil {
			made(s)
		}
		return s, err
	}, ratelimit.Config{
		Key:     func(r *http.Request) string { return r.Header.Get("X-Test-Tenant") },
		OnError: func(_ *http.Request, err error) { t.Errorf("store error: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close(context.Background()) })
	return lim
}

type take struct {
	tokens, remaining, reset uint64
	ok                       bool
}

func mustTake(t *testing.T, s *redislimit.Store, key string) take {
	t.Helper()
	tokens, remaining, reset, ok, err := s.Take(t.Context(), key)
	if err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	return take{tokens, remaining, reset, ok}
}

func TestSharedBudget(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		const budget, attempts = 10, 60
		cfg := redislimit.Config{Tokens: budget, Interval: time.Hour, Prefix: testenv.Prefix()}
		// Two gateway instances, each with its own client and store.
		stores := []*redislimit.Store{newStore(t, client(t), cfg), newStore(t, client(t), cfg)}

		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  []take
			errs []error
			lost atomic.Int64
		)
		for i := range attempts {
			wg.Go(func() {
				tokens, remaining, reset, ok, err := stores[i%2].Take(t.Context(), "acme")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case ok:
					won = append(won, take{tokens, remaining, reset, ok})
				default:
					lost.Add(1)
					if tokens != budget || remaining != 0 {
						errs = append(errs, errors.New("refusal reported limit "+strconv.FormatUint(tokens, 10)+
							", remaining "+strconv.FormatUint(remaining, 10)))
					}
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatal(errors.Join(errs...))
		}
		if len(won) != budget || lost.Load() != attempts-budget {
			t.Fatalf("%d takes succeeded and %d were refused; want %d and %d", len(won), lost.Load(), budget, attempts-budget)
		}
		// Atomic takes hand out each remaining count exactly once.
		var remaining []uint64
		for _, w := range won {
			remaining = append(remaining, w.remaining)
			if w.tokens != budget || w.reset != won[0].reset {
				t.Errorf("take %+v: want limit %d and the same reset as %+v", w, budget, won[0])
			}
		}
		slices.Sort(remaining)
		if want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(remaining, want) {
			t.Errorf("remaining counts %v, want %v", remaining, want)
		}
	})
}

func TestRefill(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		s := newStore(t, client(t), redislimit.Config{Tokens: 3, Interval: 300 * time.Millisecond, Prefix: testenv.Prefix()})
		deadline := time.Now().Add(10 * time.Second)
		// An interval may end between two takes on a slow machine: take
		// until one is refused.
		for mustTake(t, s, "acme").ok {
			if time.Now().After(deadline) {
				t.Fatal("never refused")
			}
		}
		for {
			got := mustTake(t, s, "acme")
			if got.ok {
				if got.remaining != 2 {
					t.Errorf("first take after refill left %d, want 2 (a full bucket)", got.remaining)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("bucket never refilled")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func TestReset(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		s := newStore(t, client(t), redislimit.Config{Tokens: 1, Interval: time.Hour, Prefix: testenv.Prefix()})
		before := time.Now()
		first := mustTake(t, s, "acme")
		second := mustTake(t, s, "acme")
		if !first.ok || second.ok {
			t.Fatalf("takes %+v, %+v: want the first allowed and the second refused", first, second)
		}
		if second.reset != first.reset {
			t.Errorf("reset moved from %d to %d within one interval", first.reset, second.reset)
		}
		// Redis runs on this host in tests, so its clock is ours give or
		// take a little.
		reset := time.Unix(0, int64(first.reset))
		if lo, hi := before.Add(time.Hour-2*time.Second), time.Now().Add(time.Hour+2*time.Second); reset.Before(lo) || reset.After(hi) {
			t.Errorf("reset %s, want an hour after the first take (%s..%s)", reset, lo, hi)
		}
	})
}

func TestBucketKey(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		rdb := client(t)
		prefix := testenv.Prefix()
		s := newStore(t, rdb, redislimit.Config{Tokens: 5, Interval: time.Hour, Prefix: prefix})
		mustTake(t, s, "acme")

		key := prefix + "rl:{acme}"
		if s.Key("acme") != key {
			t.Errorf("Key = %q, want %q", s.Key("acme"), key)
		}
		ttl, err := rdb.PTTL(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The expiry is the interval's end rounded up to the millisecond.
		if ttl <= 0 || ttl > time.Hour+time.Millisecond {
			t.Errorf("PTTL %s, want an expiry at the end of the hour's interval", ttl)
		}
		if avail, err := rdb.HGet(t.Context(), key, "avail").Result(); err != nil || avail != "4" {
			t.Errorf("stored avail %q (%v), want \"4\"", avail, err)
		}
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			slot, err := cc.ClusterKeySlot(t.Context(), key).Result()
			if err != nil {
				t.Fatal(err)
			}
			tag, err := cc.ClusterKeySlot(t.Context(), "acme").Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot != tag {
				t.Errorf("key in slot %d, tenant's tag in %d: the key is not hash-tagged", slot, tag)
			}
		}
	})
}

func TestIdleBucketExpires(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		rdb := client(t)
		s := newStore(t, rdb, redislimit.Config{Tokens: 2, Interval: 100 * time.Millisecond, Prefix: testenv.Prefix()})
		mustTake(t, s, "acme")
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := rdb.Exists(t.Context(), s.Key("acme")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("idle bucket never expired")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := mustTake(t, s, "acme"); !got.ok || got.remaining != 1 {
			t.Errorf("take after expiry %+v, want a full bucket (remaining 1)", got)
		}
	})
}

func TestSetGetBurst(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		ctx := t.Context()
		s := newStore(t, client(t), redislimit.Config{Tokens: 5, Interval: time.Hour, Prefix: testenv.Prefix()})
		get := func(key string) [2]uint64 {
			t.Helper()
			tokens, remaining, err := s.Get(ctx, key)
			if err != nil {
				t.Fatalf("Get(%q): %v", key, err)
			}
			return [2]uint64{tokens, remaining}
		}

		if got := get("acme"); got != [2]uint64{0, 0} {
			t.Errorf("Get of an unknown key = %v, want [0 0]", got)
		}
		if err := s.Set(ctx, "acme", 3, time.Hour); err != nil {
			t.Fatal(err)
		}
		if got := get("acme"); got != [2]uint64{3, 3} {
			t.Errorf("Get after Set(3) = %v, want [3 3]", got)
		}
		if got := mustTake(t, s, "acme"); !got.ok || got.tokens != 3 || got.remaining != 2 {
			t.Errorf("Take after Set(3) = %+v, want limit 3, remaining 2", got)
		}
		if got := get("acme"); got != [2]uint64{3, 2} {
			t.Errorf("Get = %v, want [3 2]: Get must not take", got)
		}
		if err := s.Burst(ctx, "acme", 2); err != nil {
			t.Fatal(err)
		}
		if got := get("acme"); got != [2]uint64{3, 4} {
			t.Errorf("Get after Burst(2) = %v, want [3 4]", got)
		}
		for i := range 4 {
			if got := mustTake(t, s, "acme"); !got.ok {
				t.Fatalf("take %d of the burst refused", i+1)
			}
		}
		if got := mustTake(t, s, "acme"); got.ok || got.tokens != 3 || got.remaining != 0 {
			t.Errorf("take past the burst = %+v, want refused with limit 3, remaining 0", got)
		}

		// Burst on a key with no bucket starts a full one on the store's
		// limit and adds to it.
		if err := s.Burst(ctx, "globex", 2); err != nil {
			t.Fatal(err)
		}
		if got := get("globex"); got != [2]uint64{5, 7} {
			t.Errorf("Get after Burst on a new key = %v, want [5 7]", got)
		}
	})
}

// TestStoredWindow plants buckets to check the interval arithmetic
// without waiting for it.
func TestStoredWindow(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		rdb := client(t)
		s := newStore(t, rdb, redislimit.Config{Tokens: 4, Interval: time.Hour, Prefix: testenv.Prefix()})
		now := time.Now()
		plant := func(key string, start time.Time, avail int) {
			t.Helper()
			err := rdb.HSet(t.Context(), s.Key(key), "start", start.UnixMicro(), "avail", avail).Err()
			if err != nil {
				t.Fatal(err)
			}
			rdb.Expire(t.Context(), s.Key(key), time.Minute)
		}

		// Two and a half intervals ago: refilled, and the interval keeps to
		// the bucket's grid.
		old := now.Add(-150 * time.Minute)
		plant("old", old, 0)
		got := mustTake(t, s, "old")
		if !got.ok || got.remaining != 3 {
			t.Errorf("take on a stale bucket = %+v, want a refilled one (remaining 3)", got)
		}
		if want := uint64(old.Add(3*time.Hour).UnixMicro() * 1000); got.reset != want {
			t.Errorf("reset %d, want %d (start + 3 intervals)", got.reset, want)
		}

		// A start in the future (the server clock went back): the interval
		// starts again now instead of lasting until then.
		plant("ahead", now.Add(24*time.Hour), 0)
		got = mustTake(t, s, "ahead")
		if got.ok {
			t.Errorf("take on an empty bucket = %+v, want refused", got)
		}
		if reset := time.Unix(0, int64(got.reset)); reset.After(time.Now().Add(time.Hour + 2*time.Second)) {
			t.Errorf("reset %s is more than an interval away", reset)
		}
	})
}

// TestLargeBudgets: any budget up to 2^53 per interval, intervals from
// 1ms to 24h, refills in full at the end of each interval, on the grid of
// the bucket's first take. Buckets are planted in the past, so nothing
// waits for an interval to end.
func TestLargeBudgets(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		rdb := client(t)
		for _, tokens := range []uint64{3, 100_000_000, 1_000_000_000, 1 << 53} {
			for _, interval := range []time.Duration{time.Millisecond, time.Second, 24 * time.Hour} {
				s := newStore(t, rdb, redislimit.Config{Tokens: tokens, Interval: interval, Prefix: testenv.Prefix()})
				// An empty bucket two and a half intervals old.
				start := time.Now().Add(-5 * interval / 2).Truncate(time.Microsecond) // the store's resolution
				if err := rdb.HSet(t.Context(), s.Key("acme"), "start", start.UnixMicro(), "avail", 0).Err(); err != nil {
					t.Fatal(err)
				}
				got := mustTake(t, s, "acme")
				if !got.ok || got.tokens != tokens || got.remaining != tokens-1 {
					t.Errorf("%d per %s: take on a bucket emptied intervals ago = %+v, want ok with %d left", tokens, interval, got, tokens-1)
				}
				reset := time.Unix(0, int64(got.reset))
				if off := reset.Sub(start) % interval; off != 0 || !reset.After(start.Add(2*interval)) {
					t.Errorf("%d per %s: reset %s is not a later interval's end on the bucket's grid (start %s)", tokens, interval, reset, start)
				}
				if got := mustTake(t, s, "acme"); interval >= time.Second && (!got.ok || got.remaining != tokens-2) {
					t.Errorf("%d per %s: second take = %+v, want ok with %d left", tokens, interval, got, tokens-2)
				}
			}
		}
	})
}

// TestLargeBudgetEverySecond: 1e8 per second is 1e8 in the second second
// too, through the middleware, headers included.
func TestLargeBudgetEverySecond(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		var store *redislimit.Store
		lim := newLimiter(t, client(t), testenv.Prefix(), ratelimit.Limits{"acme": {Tokens: 100_000_000, Interval: time.Second}},
			func(s *redislimit.Store) { store = s })
		h := lim.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		first := mustTake(t, store, "acme")
		time.Sleep(time.Until(time.Unix(0, int64(first.reset))) + 20*time.Millisecond)
		for i := range 300 {
			r := httptest.NewRequest(http.MethodPost, "/v1/payments", nil)
			r.Header.Set("X-Test-Tenant", "acme")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			remaining, _ := strconv.ParseUint(w.Header().Get(ratelimit.HeaderRemaining), 10, 64)
			if w.Code != http.StatusOK || w.Header().Get(ratelimit.HeaderLimit) != "100000000" ||
				remaining < 100_000_000-300 || remaining > 100_000_000-1 {
				t.Fatalf("request %d after the first second: %d, RateLimit-Limit %s, -Remaining %s",
					i+1, w.Code, w.Header().Get(ratelimit.HeaderLimit), w.Header().Get(ratelimit.HeaderRemaining))
			}
		}
	})
}

func TestClose(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		ctx := t.Context()
		cfg := redislimit.Config{Tokens: 2, Interval: time.Hour, Prefix: testenv.Prefix()}
		rdb := client(t)
		s := newStore(t, rdb, cfg)
		mustTake(t, s, "acme")
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		tokens, remaining, reset, ok, err := s.Take(ctx, "acme")
		if !errors.Is(err, limiter.ErrStopped) || tokens != 0 || remaining != 0 || reset != 0 || ok {
			t.Errorf("Take after Close = %d %d %d %t %v, want zeros and ErrStopped", tokens, remaining, reset, ok, err)
		}
		if _, _, err := s.Get(ctx, "acme"); !errors.Is(err, limiter.ErrStopped) {
			t.Errorf("Get after Close: %v, want ErrStopped", err)
		}
		if err := s.Set(ctx, "acme", 1, time.Second); !errors.Is(err, limiter.ErrStopped) {
			t.Errorf("Set after Close: %v, want ErrStopped", err)
		}
		if err := s.Burst(ctx, "acme", 1); !errors.Is(err, limiter.ErrStopped) {
			t.Errorf("Burst after Close: %v, want ErrStopped", err)
		}
		// The bucket is shared state: closing one instance keeps it.
		other := newStore(t, rdb, cfg)
		if got := mustTake(t, other, "acme"); !got.ok || got.remaining != 0 {
			t.Errorf("other instance's take = %+v, want the last token", got)
		}
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	tests := []struct {
		name   string
		client redis.UniversalClient
		cfg    *redislimit.Config
		want   []string
	}{
		{"defaults", client, nil, nil},
		{"nil client", nil, nil, []string{"nil client"}},
		{"sub-microsecond interval", client, &redislimit.Config{Interval: 500 * time.Nanosecond}, []string{"interval"}},
		{"too many tokens", client, &redislimit.Config{Tokens: math.MaxUint64}, []string{"tokens"}},
		{"negative idle ttl", client, &redislimit.Config{IdleTTL: -time.Second}, []string{"idle_ttl"}},
		{"every problem", nil, &redislimit.Config{Tokens: math.MaxUint64, IdleTTL: -1}, []string{"nil client", "tokens", "idle_ttl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := redislimit.New(tt.client, tt.cfg)
			testenv.WantError(t, "New", err, tt.want)
		})
	}
}

// TestUnreachableRedisFailsOpen needs no Redis: it checks that a dead
// Redis is an error for the store and a pass for the middleware.
func TestUnreachableRedisFailsOpen(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, client, redislimit.Config{Tokens: 1, Interval: time.Hour})
	if _, _, _, ok, err := s.Take(t.Context(), "acme"); err == nil || ok {
		t.Fatalf("Take on a dead Redis: ok %t, err %v; want an error", ok, err)
	}

	var reported atomic.Int64
	lim, err := ratelimit.New(ratelimit.Limits{"acme": {Tokens: 1, Interval: time.Hour}}, func(l ratelimit.Limit) (limiter.Store, error) {
		return redislimit.New(client, &redislimit.Config{Tokens: l.Tokens, Interval: l.Interval})
	}, ratelimit.Config{
		Key:     func(*http.Request) string { return "acme" },
		OnError: func(*http.Request, error) { reported.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close(context.Background()) })
	h := lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/payments", nil))
		if w.Code != http.StatusNoContent {
			t.Fatalf("status %d with Redis down, want the handler's 204", w.Code)
		}
	}
	if reported.Load() != 3 {
		t.Errorf("OnError called %d times, want 3", reported.Load())
	}
}

// TestMiddlewareAcrossInstances runs two gateways' middleware on one Redis:
// together they admit the tenant's budget once, not twice.
func TestMiddlewareAcrossInstances(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		prefix := testenv.Prefix()
		limits := ratelimit.Limits{"acme": {Tokens: 4, Interval: time.Hour}, "globex": {Tokens: 2, Interval: time.Hour}}
		var served atomic.Int64
		var gateways []http.Handler
		for range 2 {
			lim := newLimiter(t, client(t), prefix, limits, nil)
			gateways = append(gateways, lim.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })))
		}
		status := map[string][]int{}
		for i := range 10 {
			for _, tenant := range []string{"acme", "globex"} {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", nil)
				r.Header.Set("X-Test-Tenant", tenant)
				w := httptest.NewRecorder()
				gateways[i%2].ServeHTTP(w, r)
				status[tenant] = append(status[tenant], w.Code)
			}
		}
		for tenant, want := range map[string]int{"acme": 4, "globex": 2} {
			got := status[tenant]
			for i, code := range got {
				wantCode := http.StatusOK
				if i >= want {
					wantCode = http.StatusTooManyRequests
				}
				if code != wantCode {
					t.Errorf("%s: statuses %v, want %d × 200 then 429", tenant, got, want)
					break
				}
			}
		}
		if served.Load() != 6 {
			t.Errorf("handler ran %d times, want 6", served.Load())
		}
	})
}

func BenchmarkTake(b *testing.B) {
	rdb := testenv.Redis(b)
	cases := []struct {
		name   string
		tokens uint64
	}{
		{"allowed", 1 << 53},
		{"denied", 1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := redislimit.New(rdb, &redislimit.Config{Tokens: c.tokens, Interval: time.Hour, Prefix: testenv.Prefix()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := b.Context()
			b.Cleanup(func() { _ = rdb.Del(context.Background(), s.Key("acme")).Err() })
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, _, err := s.Take(ctx, "acme"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
