// Package ratelimit is net/http middleware that gives each tenant its own
// budget of requests: Limit.Tokens per Limit.Interval. The tenant comes from
// Config.Key, a function the application supplies (the authenticated tenant,
// never a client-supplied header such as X-Forwarded-For, which any client
// can forge to get a fresh budget). A tenant without an entry in Limits is
// not limited. Every response to a limited tenant carries RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset (whole seconds until the budget
// refills); a refused request also gets Retry-After and goes to
// Config.OnLimited as a *problem.Error (the error carrier the
// application's problem writer reads) whose Cause is a *LimitedError, so
// the application renders its own 429 problem.
//
// Budgets are kept in stores behind go-limiter's interface (limiter.Store
// from github.com/sethvargo/go-limiter). A store holds one limit for all
// its keys, so the middleware asks a StoreFunc for one store per distinct
// Limit and uses the tenant as the key: MemoryStore keeps budgets in the
// process (Memory, our own fixed window: go-limiter's memorystore cuts any
// budget above √(interval in ns), 1e8 per second to 10), redislimit.New
// shares them between gateway instances through Redis. The middleware does
// not use Store.Set to give keys their own limits: Set refills the bucket,
// and a key a store has dropped (Memory sweeps idle keys, Redis expires
// them) comes back silently with the store's own limit.
//
// When the store fails (Redis unreachable, a timeout), the request is let
// through and the error goes to Config.OnError: an outage of the limiter
// should not become an outage of the API. Use Config.Timeout to bound how
// long a slow store can hold a request.
//
//	lim, err := ratelimit.New(ratelimit.Limits{
//		"acme": {Tokens: 100, Interval: time.Second},
//	}, ratelimit.MemoryStore, ratelimit.Config{
//		Key: func(r *http.Request) string { return tenantOf(r) },
//	})
//	if err != nil { … }
//	defer lim.Close(ctx)
//	http.Handle("/v1/", lim.Wrap(api))
package ratelimit
