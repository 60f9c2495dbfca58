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
// Idempotency-Key (or a fenced write) will absorb. WithWait closes the
// failover's window: claims, completions, holds and renewals return only
// once replicas acknowledged them (WAIT in the same round trip, one per
// pipelined batch; wait.go), and a shortfall is idempotency.ErrNotDurable.
// It does nothing for the primary's own crash without a replica to take
// over; for that, AOF, or pgstore: PostgreSQL is the source of truth.
//
// # Fencing tokens
//
// A claim's fencing token is the record's previous token plus one, or the
// Redis server's clock in microseconds (TIME), whichever is higher: about
// 1.8e15 today, below 2^53 (exact as a JavaScript number) until the year
// 2255. Counting alone would start again at 1 for a record Redis lost, and
// an upstream that refuses stale tokens could not tell the re-run from the
// original; with the clock, the first claim after a loss still gets a token
// higher than any issued before it. The scripts run on the node that owns
// the record's key, so in a Redis Cluster the token comes from that node's
// clock. pgstore and memstore count from 1 instead.
//
// What can still go wrong:
//
//   - A clock that goes backwards, at the moment a record is lost. While a
//     record survives, its tokens rise whatever the clock does. But the
//     first claim after a loss gets the clock's value, and when the node
//     issuing it has a clock behind the one that issued the record's last
//     token (by more than the time since), the new token is lower, and an
//     upstream refuses the re-run as stale. This happens on a failover to a
//     replica whose host clock lags, on a restart after the clock was
//     stepped back (a manual change, a VM restored from a snapshot, NTP
//     stepping rather than slewing), and in a cluster when a slot moves to
//     a node with a slower clock. Keep every Redis host on NTP.
//   - More than one claim of a key per microsecond. Tokens then run ahead
//     of the clock by one per extra claim, and a loss within that lead can
//     issue a token already issued. One claim of a key must wait for the
//     previous one to be released or to expire, a round trip at least, so
//     this needs a server clock with a coarse resolution.
//   - The loss itself. The token tells an upstream that the re-run is a
//     later attempt, so it can refuse what the original still tries to
//     write; it does not stop the re-run (see Durability).
//   - A change of store. pgstore and memstore count from 1, far below the
//     tokens this store issues, so moving a deployment from redisstore to
//     one of them makes its tokens go down. Moving the other way is safe.
//   - Upstreams that keep tokens in 32-bit integers: the tokens need 64.
//
// # Deadlines
//
// Every call returns its context's error once the context ends, whatever
// the client's own timeouts (go-redis ignores the context on a connection
// it holds unless ContextTimeoutEnabled is set): each round trip runs on a
// goroutine of the Store's, which Close waits for. A script whose caller
// gave up before it was sent is never sent; one already sent may still run,
// as with any command whose reply is lost. One gap remains: a pipeline of
// several callers that waits for a connection of the client's pool, every
// one being busy, still carries the script of a caller that gives up during
// that wait, as long as another caller in it still waits.
//
// # Redis
//
// Redis 5 or later: the scripts write after reading TIME, which needs
// effects replication (the default since Redis 5, the only mode since 7;
// on Redis 5 and 6, lua-replicate-commands must not be turned off).
// Notifications use classic PUBLISH, which a cluster relays to every node;
// that keeps Watch working whichever node its connection lands on, at the
// cost of some cluster-bus traffic per completed request. A notification
// sent while the watch connection reconnects is lost; callers poll as well.
package redisstore
