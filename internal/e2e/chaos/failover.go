package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// The failover scenarios: the primary's host dies under load, its replica
// or standby behind by a set lag (replicas.go), and is promoted. Each
// deployment is measured in sync and lagging, and with the options that
// close what a lagging failover loses: the rows without the option are
// the "before", those with it the "after".

// Lags, as measured in the issue that asked for these scenarios: a Redis
// replica half a second behind, a PostgreSQL standby 200ms behind.
const (
	redisLag = 500 * time.Millisecond
	pgLag    = 200 * time.Millisecond
)

// redisWait is idempotency.redis_wait and jobs_api.redis_wait with a
// timeout above the replica's lag (and below store_timeout, 2s): every
// claim, completion and accepted job waits for the replica, so a lagging
// replica slows answers instead of refusing them.
var redisWait = []setting{
	{key: "idempotency.redis_wait", value: "{replicas: 1, timeout: 1s}"},
	{key: "jobs_api.redis_wait", value: "{replicas: 1, timeout: 1s}"},
}

func failoverScenarios() []scenario {
	redis := func(name string, lag time.Duration, settings ...setting) scenario {
		return scenario{
			name: name, store: "redis", mixed: true, workers: 1, spread: 14 * time.Second, faultAt: 5 * time.Second,
			deploy: withSentinel(lag), fault: sentinelFailover, finishWithin: 90 * time.Second, settings: settings,
		}
	}
	pg := func(name string, lag time.Duration, sync bool, settings ...setting) scenario {
		return scenario{
			name: name, mixed: true, workers: 2, spread: 14 * time.Second, faultAt: 5 * time.Second,
			// A job whose worker lost its lock in the failover can wait
			// for asynq's recovery of its task (up to about 2 minutes)
			// where the takeover pass is missing.
			deploy: withStandby(lag, sync), fault: promoteStandby, finishWithin: 150 * time.Second, settings: settings,
		}
	}
	partition := func(name, server string, members ...string) scenario {
		return scenario{
			name: name, store: server, mixed: true, workers: 2, spread: 24 * time.Second, faultAt: 4 * time.Second,
			deploy: cutOff(server, members...), fault: partitionMembers(4 * lease), finishWithin: 150 * time.Second,
		}
	}
	return []scenario{
		{
			name: "redis-aof-restart", store: "redis", mixed: true, workers: 1, spread: 12 * time.Second, faultAt: 4 * time.Second,
			deploy: withAOF, fault: restartAOF, finishWithin: 90 * time.Second,
		},
		redis("redis-failover-sync", 0),
		redis("redis-failover-lag", redisLag),
		redis("redis-failover-lag-wait", redisLag, redisWait...),
		pg("pg-failover-async", 0, false),
		pg("pg-failover-async-lag", pgLag, false),
		pg("pg-failover-sync-lag", pgLag, true),
		partition("redis-partition", "redis", "gateway-a", "worker-1"),
		partition("pg-partition", "postgres", "gateway-a", "worker-1"),
		{
			// A slow receiver (4 to 12s, longer than the 5s lock) keeps
			// worker-1's deliveries in flight when it loses Redis, and
			// with it its locks and its tasks' leases.
			name: "worker-lock-partition", jobs: true, workers: 2, spread: 6 * time.Second, faultAt: 3 * time.Second,
			upstreamLatency: 8 * time.Second, maxKeys: 100, deploy: cutOff("redis", "worker-1"), fault: partitionMembers(20 * time.Second),
			finishWithin: 150 * time.Second,
		},
	}
}

// sentinelFailover crashes the Redis primary's host and waits for the
// sentinel to promote the replica (a second to notice, then the vote).
func sentinelFailover(ctx context.Context, e *env) error {
	ha := e.dep.redisHA
	ha.crash()
	return ha.waitPromoted(ctx, 60*time.Second)
}

// promoteStandby crashes the PostgreSQL primary's host and, a second
// later (the time a failover manager takes to decide), promotes the
// standby. The processes find it through their multi-host URL.
func promoteStandby(ctx context.Context, e *env) error {
	ha := e.dep.pgHA
	if err := ha.crash(); err != nil {
		return err
	}
	if !proc.Sleep(ctx, time.Second) {
		return ctx.Err()
	}
	return ha.promote(ctx)
}

// restartAOF kills the Redis with the append-only file (SIGKILL: what
// it had not yet written to the file is lost) and starts it again from
// the file.
func restartAOF(ctx context.Context, e *env) error { return e.dep.redisAOF.Restart(ctx) }

// partitionMembers cuts the members the deployment gave their own proxy
// from their server for d — every byte stops, connections stay open, as
// in a network partition — then heals the partition.
func partitionMembers(d time.Duration) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		if len(e.dep.cuts) == 0 {
			return fmt.Errorf("the deployment gives no member a proxy of its own")
		}
		for _, p := range e.dep.cuts {
			p.Freeze()
		}
		proc.Sleep(ctx, d)
		for _, p := range e.dep.cuts {
			p.Thaw()
		}
		return nil
	}
}
