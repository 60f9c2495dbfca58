package redislimit_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/ratelimit/ratelimittest"
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
	{"single", func(t testing.TB) redis.UniversalClient { return testkit.Redis(t) }},
	{"cluster", func(t testing.TB) redis.UniversalClient { return testkit.RedisCluster(t) }},
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
// X-Test-Tenant header; a store error fails the test.
func newLimiter(t *testing.T, rdb redis.UniversalClient, prefix string, limits ratelimit.Limits) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(limits, func(l ratelimit.Limit) (limiter.Store, error) {
		return redislimit.New(rdb, &redislimit.Config{Tokens: l.Tokens, Interval: l.Interval, Prefix: prefix})
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

// TestConformance: the suite every rate-limit store passes, on each
// backend, every store under a prefix of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		ratelimittest.Run(t, func(t *testing.T, tokens uint64, interval time.Duration) limiter.Store {
			return newStore(t, client(t), redislimit.Config{Tokens: tokens, Interval: interval, Prefix: testkit.Prefix()})
		})
	})
}

func TestBucketKey(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		rdb := client(t)
		prefix := testkit.Prefix()
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
		s := newStore(t, rdb, redislimit.Config{Tokens: 2, Interval: 100 * time.Millisecond, Prefix: testkit.Prefix()})
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

// TestStoredWindow plants buckets to check the interval arithmetic
// without waiting for it.
func TestStoredWindow(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		rdb := client(t)
		s := newStore(t, rdb, redislimit.Config{Tokens: 4, Interval: time.Hour, Prefix: testkit.Prefix()})
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

// TestCloseKeepsBuckets: closing one instance's store leaves the buckets
// in Redis to the others.
func TestCloseKeepsBuckets(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		cfg := redislimit.Config{Tokens: 2, Interval: time.Hour, Prefix: testkit.Prefix()}
		rdb := client(t)
		s := newStore(t, rdb, cfg)
		mustTake(t, s, "acme")
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
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
			testkit.WantError(t, "New", err, tt.want)
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
		prefix := testkit.Prefix()
		limits := ratelimit.Limits{"acme": {Tokens: 4, Interval: time.Hour}, "globex": {Tokens: 2, Interval: time.Hour}}
		var served atomic.Int64
		var gateways []http.Handler
		for range 2 {
			lim := newLimiter(t, client(t), prefix, limits)
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
	rdb := testkit.Redis(b)
	cases := []struct {
		name   string
		tokens uint64
	}{
		{"allowed", 1 << 53},
		{"denied", 1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := redislimit.New(rdb, &redislimit.Config{Tokens: c.tokens, Interval: time.Hour, Prefix: testkit.Prefix()})
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
