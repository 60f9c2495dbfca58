package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/problem"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tenantHeader carries the tenant in these tests only; in the gateway the
// tenant comes from authentication.
const tenantHeader = "X-Test-Tenant"

func tenantKey(r *http.Request) string { return r.Header.Get(tenantHeader) }

// okHandler answers 200 and counts its calls.
type okHandler struct{ calls atomic.Int64 }

func (h *okHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.calls.Add(1)
	w.WriteHeader(http.StatusOK)
}

func newLimiter(t *testing.T, limits ratelimit.Limits, stores ratelimit.StoreFunc, cfg ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	if cfg.Key == nil {
		cfg.Key = tenantKey
	}
	lim, err := ratelimit.New(limits, stores, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// t.Context is already cancelled when cleanups run.
	t.Cleanup(func() { _ = lim.Close(context.Background()) })
	return lim
}

func get(h http.Handler, tenant string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/v1/payments", nil)
	if tenant != "" {
		r.Header.Set(tenantHeader, tenant)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func headerInt(t *testing.T, w *httptest.ResponseRecorder, name string) int64 {
	t.Helper()
	v := w.Header().Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s = %q, want an integer", name, v)
	}
	return n
}

func TestAllowedAndDenied(t *testing.T) {
	t.Parallel()
	next := &okHandler{}
	var limited []error
	lim := newLimiter(t, ratelimit.Limits{"acme": {Tokens: 3, Interval: time.Hour}}, ratelimit.MemoryStore, ratelimit.Config{
		OnLimited: func(w http.ResponseWriter, r *http.Request, err error) {
			limited = append(limited, err)
			ratelimit.DefaultOnLimited(w, r, err)
		},
	})
	h := lim.Wrap(next)

	for i := range 3 {
		w := get(h, "acme")
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i+1, w.Code)
		}
		if got := headerInt(t, w, ratelimit.HeaderLimit); got != 3 {
			t.Errorf("request %d: RateLimit-Limit %d, want 3", i+1, got)
		}
		if got, want := headerInt(t, w, ratelimit.HeaderRemaining), int64(2-i); got != want {
			t.Errorf("request %d: RateLimit-Remaining %d, want %d", i+1, got, want)
		}
		if got := headerInt(t, w, ratelimit.HeaderReset); got < 1 || got > 3600 {
			t.Errorf("request %d: RateLimit-Reset %d, want 1..3600 seconds", i+1, got)
		}
		if v := w.Header().Get(ratelimit.HeaderRetryAfter); v != "" {
			t.Errorf("request %d: Retry-After %q on an allowed request", i+1, v)
		}
	}

	w := get(h, "acme")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th request: status %d, want 429", w.Code)
	}
	if next.calls.Load() != 3 {
		t.Errorf("next ran %d times, want 3", next.calls.Load())
	}
	if got := headerInt(t, w, ratelimit.HeaderRemaining); got != 0 {
		t.Errorf("RateLimit-Remaining %d, want 0", got)
	}
	if got := headerInt(t, w, ratelimit.HeaderLimit); got != 3 {
		t.Errorf("RateLimit-Limit %d, want 3", got)
	}
	retry := headerInt(t, w, ratelimit.HeaderRetryAfter)
	if retry < 1 || retry > 3600 {
		t.Errorf("Retry-After %d, want 1..3600", retry)
	}
	if reset := headerInt(t, w, ratelimit.HeaderReset); reset != retry {
		t.Errorf("RateLimit-Reset %d, Retry-After %d: want them equal on a refusal", reset, retry)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var body struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if body.Type != "https://idemgate.dev/problems/rate-limited" || body.Status != 429 || body.Detail == "" {
		t.Errorf("problem %+v, want type .../rate-limited, status 429 and a detail", body)
	}

	if len(limited) != 1 {
		t.Fatalf("OnLimited called %d times, want 1", len(limited))
	}
	err := limited[0]
	if !errors.Is(err, ratelimit.ErrLimited) {
		t.Errorf("OnLimited error %v does not wrap ErrLimited", err)
	}
	re, ok := errors.AsType[*problem.Error](err)
	if !ok {
		t.Fatalf("OnLimited error %T is not a *problem.Error", err)
	}
	if re.RetryAfter != time.Duration(retry)*time.Second || re.Detail == "" {
		t.Errorf("problem.Error RetryAfter %v, Detail %q; want %ds and a detail", re.RetryAfter, re.Detail, retry)
	}
	le, ok := errors.AsType[*ratelimit.LimitedError](err)
	if !ok {
		t.Fatalf("OnLimited error %v has no *LimitedError cause", err)
	}
	want := ratelimit.LimitedError{Tenant: "acme", Limit: ratelimit.Limit{Tokens: 3, Interval: time.Hour}}
	if *le != want {
		t.Errorf("LimitedError %+v, want %+v", *le, want)
	}
}

func TestUnlimitedTenant(t *testing.T) {
	t.Parallel()
	next := &okHandler{}
	lim := newLimiter(t, ratelimit.Limits{"acme": {Tokens: 1, Interval: time.Hour}}, ratelimit.MemoryStore, ratelimit.Config{})
	h := lim.Wrap(next)
	for _, tenant := range []string{"globex", ""} {
		for i := range 50 {
			w := get(h, tenant)
			if w.Code != http.StatusOK {
				t.Fatalf("tenant %q request %d: status %d, want 200", tenant, i+1, w.Code)
			}
			for _, name := range []string{ratelimit.HeaderLimit, ratelimit.HeaderRemaining, ratelimit.HeaderReset, ratelimit.HeaderRetryAfter} {
				if v := w.Header().Get(name); v != "" {
					t.Fatalf("tenant %q: %s = %q on an unlimited tenant", tenant, name, v)
				}
			}
		}
	}
	if _, ok := lim.Limit("globex"); ok {
		t.Error(`Limit("globex") reports a limit`)
	}
}

func TestTenantsHaveSeparateBudgets(t *testing.T) {
	t.Parallel()
	hour := time.Hour
	tests := []struct {
		name   string
		limits ratelimit.Limits
	}{
		{"same limit, one store", ratelimit.Limits{"acme": {2, hour}, "globex": {2, hour}}},
		{"different limits, two stores", ratelimit.Limits{"acme": {2, hour}, "globex": {3, hour}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newLimiter(t, tt.limits, ratelimit.MemoryStore, ratelimit.Config{}).Wrap(&okHandler{})
			// acme uses up its budget; globex must still have all of its own.
			for range tt.limits["acme"].Tokens {
				if w := get(h, "acme"); w.Code != http.StatusOK {
					t.Fatalf("acme: status %d within its budget", w.Code)
				}
			}
			if w := get(h, "acme"); w.Code != http.StatusTooManyRequests {
				t.Fatalf("acme: status %d past its budget, want 429", w.Code)
			}
			g := tt.limits["globex"].Tokens
			for i := range g {
				w := get(h, "globex")
				if w.Code != http.StatusOK {
					t.Fatalf("globex request %d: status %d, want 200", i+1, w.Code)
				}
				if got, want := headerInt(t, w, ratelimit.HeaderRemaining), int64(g-1-i); got != want {
					t.Errorf("globex request %d: RateLimit-Remaining %d, want %d", i+1, got, want)
				}
			}
			if w := get(h, "globex"); w.Code != http.StatusTooManyRequests {
				t.Fatalf("globex: status %d past its budget, want 429", w.Code)
			}
		})
	}
}

func TestConcurrentRequestsGetExactlyTheBudget(t *testing.T) {
	t.Parallel()
	next := &okHandler{}
	h := newLimiter(t, ratelimit.Limits{"acme": {Tokens: 25, Interval: time.Hour}}, ratelimit.MemoryStore, ratelimit.Config{}).Wrap(next)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 100 {
		wg.Go(func() {
			if get(h, "acme").Code == http.StatusTooManyRequests {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if next.calls.Load() != 25 || refused.Load() != 75 {
		t.Errorf("%d allowed, %d refused; want 25 and 75", next.calls.Load(), refused.Load())
	}
}

func TestRefill(t *testing.T) {
	t.Parallel()
	h := newLimiter(t, ratelimit.Limits{"acme": {Tokens: 1, Interval: 200 * time.Millisecond}}, ratelimit.MemoryStore, ratelimit.Config{}).Wrap(&okHandler{})
	deadline := time.Now().Add(10 * time.Second)
	// Exhaust the budget; on a slow machine an interval may end between two
	// requests, so keep going until one is refused.
	for get(h, "acme").Code != http.StatusTooManyRequests {
		if time.Now().After(deadline) {
			t.Fatal("never refused")
		}
	}
	for {
		w := get(h, "acme")
		if w.Code == http.StatusOK {
			if got := headerInt(t, w, ratelimit.HeaderRemaining); got != 0 {
				t.Errorf("RateLimit-Remaining %d after refill, want 0", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("budget never refilled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeStore is a limiter.Store whose Take the test decides.
type fakeStore struct {
	take   func(ctx context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error)
	closed atomic.Int64
}

var _ limiter.Store = (*fakeStore)(nil)

func (s *fakeStore) Take(ctx context.Context, key string) (uint64, uint64, uint64, bool, error) {
	return s.take(ctx, key)
}

func (s *fakeStore) Get(context.Context, string) (uint64, uint64, error) { return 0, 0, nil }

func (s *fakeStore) Set(context.Context, string, uint64, time.Duration) error { return nil }

func (s *fakeStore) Burst(context.Context, string, uint64) error { return nil }

func (s *fakeStore) Close(context.Context) error {
	s.closed.Add(1)
	return nil
}

func storeOf(s *fakeStore) ratelimit.StoreFunc {
	return func(ratelimit.Limit) (limiter.Store, error) { return s, nil }
}

func TestStoreErrorFailsOpen(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	tests := []struct {
		name    string
		take    func(ctx context.Context, key string) (uint64, uint64, uint64, bool, error)
		timeout time.Duration
		want    error
	}{
		{
			name: "error",
			take: func(context.Context, string) (uint64, uint64, uint64, bool, error) {
				return 0, 0, 0, false, down
			},
			want: down,
		},
		{
			name: "stopped store",
			take: func(context.Context, string) (uint64, uint64, uint64, bool, error) {
				return 0, 0, 0, false, limiter.ErrStopped
			},
			want: limiter.ErrStopped,
		},
		{
			name: "slow store past Timeout",
			take: func(ctx context.Context, _ string) (uint64, uint64, uint64, bool, error) {
				<-ctx.Done()
				return 0, 0, 0, false, ctx.Err()
			},
			timeout: 20 * time.Millisecond,
			want:    context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			next := &okHandler{}
			var mu sync.Mutex
			var reported []error
			lim := newLimiter(t, ratelimit.Limits{"acme": {Tokens: 1, Interval: time.Hour}}, storeOf(&fakeStore{take: tt.take}), ratelimit.Config{
				Timeout: tt.timeout,
				OnError: func(_ *http.Request, err error) {
					mu.Lock()
					defer mu.Unlock()
					reported = append(reported, err)
				},
				OnLimited: func(http.ResponseWriter, *http.Request, error) { t.Error("OnLimited called on a store error") },
			})
			w := get(lim.Wrap(next), "acme")
			if w.Code != http.StatusOK || next.calls.Load() != 1 {
				t.Fatalf("status %d, next ran %d times; want 200 and once", w.Code, next.calls.Load())
			}
			if v := w.Header().Get(ratelimit.HeaderLimit); v != "" {
				t.Errorf("RateLimit-Limit %q set without a store answer", v)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != 1 || !errors.Is(reported[0], tt.want) {
				t.Fatalf("OnError got %v, want one error wrapping %v", reported, tt.want)
			}
			if !strings.Contains(reported[0].Error(), `"acme"`) {
				t.Errorf("OnError error %q does not name the tenant", reported[0])
			}
		})
	}
}

// TestHeaderSeconds pins the conversion of the store's reset time to
// seconds with a fixed clock.
func TestHeaderSeconds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name      string
		untilNext time.Duration
		want      string
	}{
		{"whole seconds", time.Hour, "3600"},
		{"rounded up", 1500 * time.Millisecond, "2"},
		{"just over", time.Second + time.Nanosecond, "2"},
		{"exactly one", time.Second, "1"},
		{"under a second", time.Millisecond, "1"},
		{"store clock behind ours", -3 * time.Second, "1"},
	}
	for _, tt := range tests {
		for _, allowed := range []bool{true, false} {
			name := tt.name + map[bool]string{true: "/allowed", false: "/denied"}[allowed]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				store := &fakeStore{take: func(context.Context, string) (uint64, uint64, uint64, bool, error) {
					remaining := uint64(4)
					if !allowed {
						remaining = 0
					}
					return 10, remaining, uint64(now.Add(tt.untilNext).UnixNano()), allowed, nil
				}}
				var gotErr error
				lim := newLimiter(t, ratelimit.Limits{"acme": {Tokens: 10, Interval: time.Hour}}, storeOf(store), ratelimit.Config{
					Now: func() time.Time { return now },
					OnLimited: func(w http.ResponseWriter, _ *http.Request, err error) {
						gotErr = err
						w.WriteHeader(http.StatusTooManyRequests)
					},
				})
				w := get(lim.Wrap(&okHandler{}), "acme")
				if got := w.Header().Get(ratelimit.HeaderReset); got != tt.want {
					t.Errorf("RateLimit-Reset %q, want %q", got, tt.want)
				}
				retry := w.Header().Get(ratelimit.HeaderRetryAfter)
				if allowed {
					if retry != "" || gotErr != nil {
						t.Errorf("allowed request got Retry-After %q, OnLimited %v", retry, gotErr)
					}
					return
				}
				if retry != tt.want {
					t.Errorf("Retry-After %q, want %q", retry, tt.want)
				}
				re, ok := errors.AsType[*problem.Error](gotErr)
				if !ok || strconv.FormatInt(int64(re.RetryAfter/time.Second), 10) != tt.want || re.RetryAfter%time.Second != 0 {
					t.Errorf("OnLimited got %v, want a *problem.Error with RetryAfter %ss", gotErr, tt.want)
				}
			})
		}
	}
}

func TestStoresPerDistinctLimit(t *testing.T) {
	t.Parallel()
	var made []ratelimit.Limit
	var stores []*fakeStore
	lim, err := ratelimit.New(ratelimit.Limits{
		"a": {10, time.Second},
		"b": {10, time.Second},
		"c": {10, time.Minute},
		"d": {5, time.Second},
	}, func(l ratelimit.Limit) (limiter.Store, error) {
		made = append(made, l)
		s := &fakeStore{}
		stores = append(stores, s)
		return s, nil
	}, ratelimit.Config{Key: tenantKey})
	if err != nil {
		t.Fatal(err)
	}
	if len(made) != 3 {
		t.Errorf("StoreFunc called for %v, want once per distinct limit (3)", made)
	}
	if err := lim.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, s := range stores {
		if n := s.closed.Load(); n != 1 {
			t.Errorf("store %d closed %d times, want 1", i, n)
		}
	}
}

func TestNewClosesStoresOnError(t *testing.T) {
	t.Parallel()
	first := &fakeStore{}
	calls := 0
	_, err := ratelimit.New(ratelimit.Limits{"a": {1, time.Second}, "b": {2, time.Second}}, func(ratelimit.Limit) (limiter.Store, error) {
		calls++
		if calls == 1 {
			return first, nil
		}
		return nil, errors.New("no redis")
	}, ratelimit.Config{Key: tenantKey})
	if err == nil || !strings.Contains(err.Error(), "no redis") {
		t.Fatalf("New: %v, want the StoreFunc's error", err)
	}
	if first.closed.Load() != 1 {
		t.Error("the store opened before the failure was not closed")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	key := ratelimit.Config{Key: tenantKey}
	tests := []struct {
		name   string
		limits ratelimit.Limits
		cfg    ratelimit.Config
		want   []string // substrings of the error; none means valid
	}{
		{"valid", ratelimit.Limits{"acme": {100, time.Second}}, key, nil},
		{"no limits", nil, key, nil},
		{"no key", nil, ratelimit.Config{}, []string{"key: required"}},
		{"zero tokens", ratelimit.Limits{"acme": {0, time.Second}}, key, []string{`tenant "acme": tokens`}},
		{"zero interval", ratelimit.Limits{"acme": {1, 0}}, key, []string{`tenant "acme": interval`}},
		{"negative timeout", nil, ratelimit.Config{Key: tenantKey, Timeout: -1}, []string{"timeout"}},
		{
			"every problem at once",
			ratelimit.Limits{"a": {0, time.Second}, "b": {1, -time.Second}},
			ratelimit.Config{},
			[]string{"key: required", `tenant "a": tokens`, `tenant "b": interval`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !testkit.WantError(t, "Validate", ratelimit.Validate(tt.limits, tt.cfg), tt.want) {
				return
			}
			if _, err := ratelimit.New(tt.limits, ratelimit.MemoryStore, tt.cfg); err == nil {
				t.Error("New accepted what Validate refuses")
			}
		})
	}
	if _, err := ratelimit.New(nil, nil, key); err == nil {
		t.Error("New accepted a nil StoreFunc")
	}
}
