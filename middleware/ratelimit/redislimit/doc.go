// Package redislimit is a go-limiter store (limiter.Store from
// github.com/sethvargo/go-limiter) kept in Redis, so that every gateway
// instance draws on one budget per key instead of granting the whole budget
// each. It has the semantics of ratelimit.Memory: a key gets Tokens per
// Interval, the interval starts at the key's first Take, and the bucket
// refills in full when it ends — exactly, for any budget up to 2^53 (a
// Lua number's integers) and any interval from 1µs.
//
// A bucket is one hash, changed only by Lua scripts that each touch that
// one key: atomic, one round trip, and timed by the Redis server's clock
// (TIME), so the instances' clocks need not agree. Keys are
// "<prefix>rl:{<key>}"; the hash tag keeps each bucket whole on one slot of
// a Redis Cluster. A bucket expires when its interval ends (plus IdleTTL),
// so idle keys cost no memory and no sweeper runs.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or redis.NewClusterClient
//	store, err := redislimit.New(rdb, &redislimit.Config{Tokens: 100, Interval: time.Second})
//	if err != nil { … }
//	defer store.Close(ctx)
//	limit, remaining, reset, ok, err := store.Take(ctx, tenant)
//
// A store has one limit, as a ratelimit.Memory does; ratelimit.New asks for one
// store per distinct limit, and all of them can share a client and a prefix.
//
// # Semantics and limits
//
// Like ratelimit.Memory's, the budget is a fixed window: a client can spend
// Tokens at the end of one interval and Tokens again at the start of the
// next. Take's reset is the end of the current interval in Unix nanoseconds
// of the Redis clock, with microsecond resolution. Set gives one key its own
// limit, which lasts as long as the key does: until it has gone a whole
// interval plus IdleTTL without a Take; after that the key is back on the
// store's limit. Burst adds tokens to the current interval only.
//
// Budgets are as durable as Redis: a failover to a replica that missed the
// last writes, or a restart without persistence, refills them early. That
// errs towards letting requests through, which is the point of a limiter
// that fails open. Needs Redis 5 or later (scripts call TIME before they
// write, which needs effects replication).
package redislimit
