// Package redisstore keeps idempotency records in Redis, for deployments
// that want the record off the request's critical database path. Each record
// is one hash, and every change to it (claim, renew, complete, release, hold,
// resolve) is one Lua script run against that hash alone: atomic, one round
// trip, and timed by the Redis server's clock, so gateway clocks need not
// agree. Keys carry a hash tag, so a Redis Cluster spreads records over its
// slots and each script runs on the node that owns its key. Records expire by
// the key's own TTL (the retention once completed; at least the retention and
// the lease while in flight), so no janitor is needed and an abandoned claim
// disappears by itself. Completions, releases and held outcomes are
// published on a channel per record, which Watch turns into wake-ups for
// duplicates waiting on an in-flight original.
//
// The scripts every request runs (claim, then complete, release or hold)
// share round trips: a script goes out at once when a pipeline is free, and
// those that queue behind busy ones go out together, each still atomic on
// its own (pipeline.go; WithPipelining tunes it or turns it off).
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or redis.NewClusterClient
//	store := redisstore.New(rdb, redisstore.WithPrefix("idemgate:"))
//	defer store.Close()
//	res, err := store.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: fp, Owner: owner, Lease: 30 * time.Second, Retention: 24 * time.Hour})
//
// # Durability
//
// A record is as durable as Redis' persistence, and no more. With AOF
// "appendfsync everysec" a crash can lose about the last second of writes;
// with RDB snapshots only, everything since the last snapshot; and an
// asynchronous replica promoted on failover can lack writes the old primary
// had acknowledged. A lost record lets the next retry of that key run the
// request again, which only an upstream that honours the forwarded
// Idempotency-Key (or a fenced write) will absorb. When that matters, use
// pgstore: PostgreSQL is the source of truth.
//
// # Redis
//
// Redis 5 or later (scripts use TIME, which needs effects replication).
// Notifications use classic PUBLISH, which a cluster relays to every node;
// that keeps Watch working whichever node its connection lands on, at the
// cost of some cluster-bus traffic per completed request. A notification
// sent while the watch connection reconnects is lost; callers poll as well.
package redisstore
