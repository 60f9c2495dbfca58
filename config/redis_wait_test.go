package config

import (
	"testing"
	"time"
)

func TestRedisWait(t *testing.T) {
	t.Parallel()
	const redis = "store: redis\nredis_url: redis://127.0.0.1:6379/0\nadmin_listen: \"\"\nauth: {mode: none}\n"
	const route = "routes:\n  - {name: r, path: /r, upstream: http://u}\n"

	t.Run("read", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(redis+"idempotency: {redis_wait: {replicas: 1, timeout: 50ms}}\njobs_api: {redis_wait: {replicas: 2, timeout: 20ms}}\n"+route),
			"x.yaml", nil, WithDefaultJobs(exampleJobs(t)))
		if err != nil {
			t.Fatal(err)
		}
		if w := c.Idempotency.RedisWait; !w.On() || w.Replicas != 1 || w.Timeout != 50*time.Millisecond {
			t.Errorf("idempotency.redis_wait: %+v", w)
		}
		if w := c.JobsAPI.RedisWait; !w.On() || w.Replicas != 2 || w.Timeout != 20*time.Millisecond {
			t.Errorf("jobs_api.redis_wait: %+v", w)
		}
	})

	t.Run("off by default", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(redis+route), "x.yaml", nil, WithDefaultJobs(exampleJobs(t)))
		if err != nil {
			t.Fatal(err)
		}
		if c.Idempotency.RedisWait.On() || c.JobsAPI.RedisWait.On() {
			t.Errorf("redis_wait on without being written: %+v %+v", c.Idempotency.RedisWait, c.JobsAPI.RedisWait)
		}
	})

	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "every mistake at once",
			yaml: redis + "idempotency: {redis_wait: {replicas: 0, timeout: 0s}}\njobs_api: {redis_wait: {replicas: -1}}\n" + route,
			want: []string{
				// replicas 0 and timeout 0s written is the zero value: off.
				"x.yaml:6: jobs_api.redis_wait.replicas: must be 1 or more, not -1",
				"x.yaml:6: jobs_api.redis_wait.timeout: must be longer than 0s, not 0s (WAIT 0 would wait for ever)",
			},
		},
		{
			name: "replicas without a timeout",
			yaml: redis + "idempotency: {redis_wait: {replicas: 1}}\n" + route,
			want: []string{"x.yaml:5: idempotency.redis_wait.timeout: must be longer than 0s, not 0s (WAIT 0 would wait for ever)"},
		},
		{
			name: "a timeout without replicas",
			yaml: redis + "idempotency: {redis_wait: {timeout: 50ms}}\n" + route,
			want: []string{"x.yaml:5: idempotency.redis_wait.replicas: must be 1 or more, not 0"},
		},
		{
			name: "another store",
			yaml: minimal + "idempotency: {redis_wait: {replicas: 1, timeout: 50ms}}\n" + route,
			want: []string{"x.yaml:4: idempotency.redis_wait: only store redis keeps idempotency records in Redis; store is memory"},
		},
		{
			name: "longer than the store timeout",
			yaml: redis + "idempotency: {store_timeout: 1s, redis_wait: {replicas: 1, timeout: 1s}}\n" + route,
			want: []string{"x.yaml:5: idempotency.redis_wait.timeout: 1s must be shorter than idempotency.store_timeout (1s), which bounds the write and its wait together"},
		},
		{
			name: "not a route's",
			yaml: redis + "routes:\n  - {name: r, path: /r, upstream: http://u, idempotency: {redis_wait: {replicas: 1, timeout: 50ms}}}\n",
			want: []string{`x.yaml:6: routes[0].idempotency.redis_wait: unknown key`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantProblems(t, tc.yaml, "x.yaml", tc.want, WithDefaultJobs(exampleJobs(t)))
		})
	}
}
