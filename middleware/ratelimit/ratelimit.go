package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sethvargo/go-limiter"

	"github.com/idemgate/idemgate/problem"
)

// The headers the middleware sets on every request of a limited tenant.
// Values are decimal integers; Reset and Retry-After count whole seconds from
// now, rounded up, never dates.
const (
	HeaderLimit      = "RateLimit-Limit"
	HeaderRemaining  = "RateLimit-Remaining"
	HeaderReset      = "RateLimit-Reset"
	HeaderRetryAfter = "Retry-After"
)

// Limit is a tenant's budget: Tokens requests per Interval. The budget
// refills in full at the end of each interval, which starts at the tenant's
// first request: a fixed window, in Memory and in redislimit alike, exact
// for any number of tokens.
type Limit struct {
	Tokens   uint64
	Interval time.Duration
}

// Limits maps a tenant to its budget. A tenant that is not in the map is not
// limited.
type Limits map[string]Limit

// StoreFunc returns a new store that gives each key the budget l. The
// middleware calls it once per distinct Limit and closes the stores in
// Close. MemoryStore is one; for Redis:
//
//	func(l ratelimit.Limit) (limiter.Store, error) {
//		return redislimit.New(rdb, &redislimit.Config{Tokens: l.Tokens, Interval: l.Interval})
//	}
type StoreFunc func(l Limit) (limiter.Store, error)

// Config configures the middleware. The zero value of every field but Key
// means its default.
type Config struct {
	// Key returns the tenant of a request; required. It should be the
	// authenticated tenant: a key taken from a header or the client's
	// address lets a client pick its own budget.
	Key func(*http.Request) string
	// OnLimited writes the response to a refused request. err is an
	// *problem.Error: it wraps ErrLimited, its Cause is a
	// *LimitedError; the RateLimit-* and Retry-After headers are already
	// set. Default DefaultOnLimited.
	OnLimited func(w http.ResponseWriter, r *http.Request, err error)
	// OnError is told when the store fails; the request is then let
	// through without RateLimit-* headers. err wraps the store's error
	// (context.Canceled when the client went away). Default: log on
	// slog.Default(), at warn level unless the request's context is done.
	OnError func(r *http.Request, err error)
	// Timeout bounds each call to the store. Default 0: only the request's
	// context and the store's own timeouts apply.
	Timeout time.Duration
	// Now is the clock used to turn the store's reset time into seconds.
	// Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.OnLimited == nil {
		c.OnLimited = DefaultOnLimited
	}
	if c.OnError == nil {
		log := slog.Default()
		c.OnError = func(r *http.Request, err error) {
			level := slog.LevelWarn
			if r.Context().Err() != nil {
				level = slog.LevelDebug // the client went away; nothing failed
			}
			log.Log(r.Context(), level, "rate limit store failed; request let through", "error", err)
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports every problem with c and limits at once.
func Validate(limits Limits, c Config) error {
	var errs []error
	if c.Key == nil {
		errs = append(errs, errors.New("key: required"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout: %s is negative", c.Timeout))
	}
	for _, tenant := range slices.Sorted(maps.Keys(limits)) {
		l := limits[tenant]
		if l.Tokens == 0 {
			errs = append(errs, fmt.Errorf("tenant %q: tokens must be at least 1", tenant))
		}
		if l.Interval <= 0 {
			errs = append(errs, fmt.Errorf("tenant %q: interval %s must be positive", tenant, l.Interval))
		}
	}
	return errors.Join(errs...)
}

// Limiter is the middleware. It is safe for concurrent use; its limits are
// fixed when it is built (build a new one to change them).
type Limiter struct {
	cfg     Config
	tenants map[string]budget
	stores  []limiter.Store
}

type budget struct {
	limit Limit
	store limiter.Store
}

// New validates limits and cfg and returns the middleware, with one store
// from stores for each distinct Limit. Close it to close those stores.
func New(limits Limits, stores StoreFunc, cfg Config) (*Limiter, error) {
	if stores == nil {
		return nil, errors.New("ratelimit: nil StoreFunc")
	}
	if err := Validate(limits, cfg); err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	l := &Limiter{cfg: cfg.withDefaults(), tenants: make(map[string]budget, len(limits))}
	byLimit := make(map[Limit]limiter.Store)
	for _, tenant := range slices.Sorted(maps.Keys(limits)) {
		limit := limits[tenant]
		st, ok := byLimit[limit]
		if !ok {
			var err error
			st, err = stores(limit)
			if err == nil && st == nil {
				err = errors.New("StoreFunc returned a nil store")
			}
			if err != nil {
				return nil, errors.Join(
					fmt.Errorf("ratelimit: store for %d per %s: %w", limit.Tokens, limit.Interval, err),
					l.Close(context.Background()))
			}
			byLimit[limit] = st
			l.stores = append(l.stores, st)
		}
		l.tenants[tenant] = budget{limit: limit, store: st}
	}
	return l, nil
}

// Limit returns the budget of tenant, and false when tenant is not limited.
func (l *Limiter) Limit(tenant string) (Limit, bool) {
	b, ok := l.tenants[tenant]
	return b.limit, ok
}

// Wrap returns next guarded by the limiter.
func (l *Limiter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := l.cfg.Key(r)
		b, limited := l.tenants[tenant]
		if !limited {
			next.ServeHTTP(w, r)
			return
		}
		tokens, remaining, reset, ok, err := l.take(r.Context(), b.store, tenant)
		if err != nil {
			// Fail open: the limiter protects capacity, not correctness, so
			// losing it for a while costs less than refusing every request.
			l.cfg.OnError(r, fmt.Errorf("ratelimit: tenant %q: %w", tenant, err))
			next.ServeHTTP(w, r)
			return
		}
		untilReset := seconds(time.Unix(0, int64(reset)).Sub(l.cfg.Now()))
		h := w.Header()
		h.Set(HeaderLimit, strconv.FormatUint(tokens, 10))
		h.Set(HeaderRemaining, strconv.FormatUint(remaining, 10))
		h.Set(HeaderReset, strconv.FormatInt(untilReset, 10))
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		h.Set(HeaderRetryAfter, strconv.FormatInt(untilReset, 10))
		l.cfg.OnLimited(w, r, &problem.Error{
			Err:        ErrLimited,
			Detail:     limitedDetail,
			RetryAfter: time.Duration(untilReset) * time.Second,
			Cause:      &LimitedError{Tenant: tenant, Limit: b.limit},
		})
	})
}

// Taker is implemented by stores that take many tokens at once, all or
// none: Memory and redislimit.Store. TakeN answers like Take.
type Taker interface {
	TakeN(ctx context.Context, key string, n uint64) (tokens, remaining, reset uint64, ok bool, err error)
}

// TakeN spends n more tokens of the tenant of r at once, for a request
// that counts as more than one (a batch counts its items), and sets the
// RateLimit-* headers on h as Wrap does. It returns nil when the tenant
// is not limited, when the tokens were taken, or when the store failed
// (reported to OnError: the limiter fails open). A refusal takes nothing
// and is the *problem.Error OnLimited would get, with
// Retry-After set on h. A store without Taker is asked for the tokens
// left, then spends them one at a time.
func (l *Limiter) TakeN(r *http.Request, h http.Header, n uint64) error {
	tenant := l.cfg.Key(r)
	b, limited := l.tenants[tenant]
	if !limited || n == 0 {
		return nil
	}
	ctx := r.Context()
	if l.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.Timeout)
		defer cancel()
	}
	tokens, remaining, reset, ok, err := takeN(ctx, b.store, tenant, n)
	if err != nil {
		l.cfg.OnError(r, fmt.Errorf("ratelimit: tenant %q: %w", tenant, err))
		return nil
	}
	untilReset := seconds(time.Unix(0, int64(reset)).Sub(l.cfg.Now()))
	h.Set(HeaderLimit, strconv.FormatUint(tokens, 10))
	h.Set(HeaderRemaining, strconv.FormatUint(remaining, 10))
	h.Set(HeaderReset, strconv.FormatInt(untilReset, 10))
	if ok {
		return nil
	}
	h.Set(HeaderRetryAfter, strconv.FormatInt(untilReset, 10))
	return &problem.Error{
		Err:        ErrLimited,
		Detail:     limitedDetail,
		RetryAfter: time.Duration(untilReset) * time.Second,
		Cause:      &LimitedError{Tenant: tenant, Limit: b.limit},
	}
}

// takeN takes n tokens from st, all or none where st is a Taker.
func takeN(ctx context.Context, st limiter.Store, key string, n uint64) (tokens, remaining, reset uint64, ok bool, err error) {
	if t, ok := st.(Taker); ok {
		return t.TakeN(ctx, key, n)
	}
	_, left, err := st.Get(ctx, key)
	if err != nil {
		return 0, 0, 0, false, err
	}
	if left < n {
		// Refused: one Take tells the limit and the reset, and spends at
		// most the one token a refusal's own request would have.
		tokens, remaining, reset, _, err = st.Take(ctx, key)
		return tokens, remaining, reset, false, err
	}
	for range n {
		tokens, remaining, reset, ok, err = st.Take(ctx, key)
		if err != nil || !ok {
			return tokens, remaining, reset, false, err
		}
	}
	return tokens, remaining, reset, true, nil
}

func (l *Limiter) take(ctx context.Context, st limiter.Store, key string) (tokens, remaining, reset uint64, ok bool, err error) {
	if l.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.Timeout)
		defer cancel()
	}
	return st.Take(ctx, key)
}

// seconds rounds d up to whole seconds, and to at least one: the store has
// just placed the reset after its own now, so a smaller value only reflects
// skew between its clock and ours, and "retry in 0 seconds" invites a
// client to hammer.
func seconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}

// Close closes the stores the limiter opened. Requests that arrive after it
// are let through and reported to OnError, so close the limiter after the
// server has stopped serving.
func (l *Limiter) Close(ctx context.Context) error {
	var errs []error
	for _, st := range l.stores {
		if err := st.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
