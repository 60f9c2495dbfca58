package config

import "time"

// RedisWait makes writes to Redis wait until replicas acknowledge them
// (WAIT), so that a failover to a replica cannot lose what a client was
// told. The zero value waits for nothing: today's behaviour, Redis'
// asynchronous replication.
type RedisWait struct {
	// Replicas that must acknowledge each write: at least 1 when set.
	Replicas int `yaml:"replicas"`
	// Timeout is the longest wait for them; a write not acknowledged by
	// then is treated as not durable. Required when Replicas is set;
	// keep it short (tens of milliseconds): a healthy replica answers
	// within a round trip.
	Timeout time.Duration `yaml:"timeout"`
}

// On reports whether w waits for replicas.
func (w RedisWait) On() bool { return w.Replicas != 0 || w.Timeout != 0 }

// validate reports w's mistakes at key.
func (w RedisWait) validate(key string, bad badFunc) {
	if !w.On() {
		return
	}
	if w.Replicas < 1 {
		bad(key+".replicas", "must be 1 or more, not %d", w.Replicas)
	}
	if w.Timeout <= 0 {
		bad(key+".timeout", "must be longer than 0s, not %v (WAIT 0 would wait for ever)", w.Timeout)
	}
}

// validateRedisWait checks idempotency.redis_wait and jobs_api.redis_wait.
func (c *Config) validateRedisWait(bad badFunc) {
	w := c.Idempotency.RedisWait
	w.validate("idempotency.redis_wait", bad)
	if w.On() {
		if c.Store != "redis" {
			bad("idempotency.redis_wait", "only store redis keeps idempotency records in Redis; store is %s", c.Store)
		}
		if st := c.Idempotency.StoreTimeout; w.Timeout > 0 && st > 0 && w.Timeout >= st {
			bad("idempotency.redis_wait.timeout", "%v must be shorter than idempotency.store_timeout (%v), which bounds the write and its wait together",
				w.Timeout, st)
		}
	}
	c.JobsAPI.RedisWait.validate("jobs_api.redis_wait", bad)
}
