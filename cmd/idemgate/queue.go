package main

import (
	"strings"

	"github.com/hibiken/asynq"
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
	var addrs []string
	for _, a := range strings.Split(redisURL, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 1 {
		return asynq.RedisClientOpt{Addr: addrs[0]}, nil
	}
	return asynq.RedisClusterClientOpt{Addrs: addrs}, nil
}
