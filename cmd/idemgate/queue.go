package main

import (
	"strings"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"

	"github.com/idemgate/idemgate/gateway"
)

// asynqRedis returns asynq's own connection options for redis_url: asynq
// gets clients of its own, never the traced ones the gateway uses.
func asynqRedis(redisURL string) (asynq.RedisConnOpt, error) {
	if strings.Contains(redisURL, "://") {
		opt, err := asynq.ParseRedisURI(redisURL)
		if err != nil {
			return nil, usagef("redis_url: %v", err)
		}
		return opt, nil
	}
	addrs := redisNodes(redisURL)
	if len(addrs) == 1 {
		return asynq.RedisClientOpt{Addr: addrs[0]}, nil
	}
	return asynq.RedisClusterClientOpt{Addrs: addrs}, nil
}

// redisNodes splits a redis_url that is not a URL: one HOST:PORT, or a
// Redis Cluster's seed nodes separated by commas.
func redisNodes(redisURL string) []string {
	var addrs []string
	for _, a := range strings.Split(redisURL, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// queuesPath is where asynqmon is mounted on the admin listener.
const queuesPath = "/admin/queues"

// mountQueues serves asynqmon, the queues' web UI and API, at queuesPath
// on g's admin listener, behind the admin token. It needs redis_url; the
// returned close stops its Redis connections.
func mountQueues(g *gateway.Gateway, redisURL string) (close func(), err error) {
	opt, err := asynqRedis(redisURL)
	if err != nil {
		return nil, err
	}
	mon := asynqmon.New(asynqmon.Options{RootPath: queuesPath, RedisConnOpt: opt})
	g.AdminMount(queuesPath, mon)
	return func() { _ = mon.Close() }, nil
}
