package config

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	const key = "e95d4bb62790bca88762e968e6ab1d23fb79d1db4f900d22414fb258db1f606a"
	const route = "routes:\n  - {name: r, path: /r, upstream: http://u}\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // each a whole line of the error
	}{
		{
			name: "postgres needs database_url",
			yaml: "admin_listen: \"\"\nauth: {mode: none}\n",
			want: []string{"x.yaml: database_url: required with store postgres; set it here or in DATABASE_URL"},
		},
		{
			name: "redis_url for the redis store, shared rate limits and enqueue routes",
			yaml: "store: redis\nadmin_listen: \"\"\nauth: {mode: none}\nrate_limit_store: redis\nroutes:\n  - {name: j, methods: [POST], path: /j, enqueue: {task: invoice.create}}\n",
			want: []string{"x.yaml: redis_url: required with store redis and rate_limit_store redis and enqueue routes like \"j\"; set it here or in REDIS_URL"},
		},
		{
			name: "URLs are checked without echoing secrets",
			yaml: minimal + "database_url: mysql://u:hunter2@db/x\nredis_url: redis://:hunter2@\nproblem_base: https://x.example/p\n",
			want: []string{
				`x.yaml:4: database_url: scheme "mysql" is not postgres or postgresql`,
				`x.yaml:5: redis_url: the URL has no host`,
				`x.yaml:6: problem_base: "https://x.example/p" must be an absolute URL ending in /`,
			},
		},
		{
			name: "a cluster node list",
			yaml: minimal + "redis_url: a:7000, b\n",
			want: []string{`x.yaml:4: redis_url: "b" is not host:port (use redis://, rediss:// or a comma list of host:port cluster nodes)`},
		},
		{
			name: "tenants are required unless auth.mode none",
			yaml: "store: memory\nadmin_listen: \"\"\n",
			want: []string{"x.yaml: tenants: at least one tenant is required with auth.mode api_key"},
		},
		{
			name: "tenant names and keys",
			yaml: "store: memory\nadmin_listen: \"\"\nauth: {mode: api_key}\ntenants:\n" +
				"  - {name: a, api_key_sha256: [" + key + "], rate_limit: {tokens: 0, interval: -1s}}\n" +
				"  - {name: a, api_key_sha256: [" + strings.ToUpper(key) + "]}\n" +
				"  - {name: anonymous, api_key_sha256: [e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, my-secret-key]}\n" +
				"  - {name: \"\"}\n",
			want: []string{
				"x.yaml:5: tenants[0].rate_limit.tokens: must be positive, not 0",
				"x.yaml:5: tenants[0].rate_limit.interval: must be positive, not -1s",
				`x.yaml:6: tenants[1].name: "a" is also the name of tenants[0]`,
				`x.yaml:6: tenants[1].api_key_sha256[0]: the same key as tenants[0] ("a"); a key must name one tenant`,
				`x.yaml:7: tenants[2].name: "anonymous" is reserved for the tenant of auth.mode none`,
				"x.yaml:7: tenants[2].api_key_sha256[0]: is the SHA-256 of an empty string",
				"x.yaml:7: tenants[2].api_key_sha256[1]: must be the hex SHA-256 of the secret (64 hex digits); this value has 13 characters",
				"x.yaml:8: tenants[3].name: required",
				"x.yaml:8: tenants[3].api_key_sha256: required with auth.mode api_key: list the SHA-256 of each key",
			},
		},
		{
			name: "enumerations",
			yaml: minimal + "log: {level: trace, format: xml, flush_interval: 1m}\nrate_limit_store: disk\nidempotency: {key_syntax: loose, on_store_error: ignore}\n",
			want: []string{
				`x.yaml:4: log.level: "trace" is not debug, info, warn or error`,
				`x.yaml:4: log.format: "xml" is not json or text`,
				`x.yaml:4: log.flush_interval: 1m0s: want 0 (every line written at once) up to 5s`,
				`x.yaml:5: rate_limit_store: "disk" is not memory or redis`,
				`x.yaml:6: idempotency.key_syntax: "loose" is not strict or compat`,
				`x.yaml:6: idempotency.on_store_error: "ignore" is not fail_closed or fail_open`,
			},
		},
		{
			name: "idempotency numbers, on a route",
			yaml: minimal + "routes:\n  - name: r\n    path: /r\n    upstream: http://u\n    idempotency:\n" +
				"      retention: 1m\n      lease: 2m\n      max_key_length: 0\n      wait_in_flight: -1s\n      max_request_bytes: 0\n" +
				"      fingerprint: {headers: [\"X Bad\"], json_fields: [order_id, /a~2]}\n      methods: [\"GE T\"]\n",
			want: []string{
				"x.yaml:10: routes[0].idempotency.lease: 2m0s is longer than retention 1m0s",
				"x.yaml:11: routes[0].idempotency.max_key_length: 0 is outside 1..4096",
				"x.yaml:12: routes[0].idempotency.wait_in_flight: must not be negative, not -1s",
				"x.yaml:13: routes[0].idempotency.max_request_bytes: must be positive, not 0",
				`x.yaml:14: routes[0].idempotency.fingerprint.headers[0]: "X Bad" is not a header name`,
				`x.yaml:14: routes[0].idempotency.fingerprint.json_fields[0]: "order_id" is not a JSON Pointer (it must start with /)`,
				`x.yaml:14: routes[0].idempotency.fingerprint.json_fields[1]: "/a~2" has a ~ not followed by 0 or 1`,
				`x.yaml:15: routes[0].idempotency.methods[0]: "GE T" is not an HTTP method`,
			},
		},
		{
			name: "a route's shorter retention is checked against the inherited lease",
			yaml: minimal + "routes:\n  - {name: r, path: /r, upstream: http://u, idempotency: {retention: 10s}}\n",
			want: []string{"x.yaml:5: routes[0].idempotency.retention: 10s is shorter than lease 30s"},
		},
		{
			name: "method override",
			yaml: minimal + "routes:\n  - {name: r, path: /r, upstream: http://u, method_override: honour}\n  - {name: s, path: /s, upstream: http://u, method_override: allow}\n",
			want: []string{`x.yaml:6: routes[1].method_override: "allow" is neither refuse nor honour`},
		},
		{
			name: "decoded content encodings",
			yaml: minimal + "routes:\n  - {name: r, path: /r, upstream: http://u, idempotency: {decode_content_encodings: [gzip, br]}}\n",
			want: []string{`x.yaml:5: routes[0].idempotency.decode_content_encodings[1]: "br" is not gzip or deflate`},
		},
		{
			name: "store timeout",
			yaml: minimal + "idempotency: {store_timeout: -2s}\nroutes:\n  - {name: r, path: /r, upstream: http://u, idempotency: {store_timeout: -1s}}\n",
			want: []string{
				"x.yaml:4: idempotency.store_timeout: must be positive, not -2s",
				"x.yaml:6: routes[0].idempotency.store_timeout: must be positive, not -1s",
			},
		},
		{
			name: "commit timeout",
			yaml: minimal + "idempotency: {commit_timeout: -2s}\nroutes:\n  - {name: r, path: /r, upstream: http://u, idempotency: {commit_timeout: -1s}}\n",
			want: []string{
				"x.yaml:4: idempotency.commit_timeout: must be positive, not -2s",
				"x.yaml:6: routes[0].idempotency.commit_timeout: must be positive, not -1s",
			},
		},
		{
			name: "lease minimum",
			yaml: minimal + "idempotency: {lease: 10ms}\n",
			want: []string{"x.yaml:4: idempotency.lease: 10ms is shorter than the minimum 100ms"},
		},
		{
			name: "route shape",
			yaml: minimal + "routes:\n" +
				"  - {path: /a, upstream: http://u}\n" +
				"  - {name: b, path: /b, path_prefix: /b, upstream: http://u, enqueue: {task: invoice.create}}\n" +
				"  - {name: c}\n" +
				"  - {name: d, path: \"/d?x=1\", upstream: \"http:///nohost\", timeout: -1s}\n",
			want: []string{
				"x.yaml:5: routes[0].name: required",
				"x.yaml:6: routes[1].path_prefix: path and path_prefix exclude each other; keep one",
				"x.yaml:6: routes[1].enqueue: upstream and enqueue exclude each other; keep one",
				"x.yaml:7: routes[2]: needs path or path_prefix",
				"x.yaml:7: routes[2]: needs upstream or enqueue",
				`x.yaml:8: routes[3].path: "/d?x=1" must be a plain path, without query, fragment, spaces or control characters`,
				`x.yaml:8: routes[3].upstream: "http:///nohost" is not an http:// or https:// URL with a host`,
				"x.yaml:8: routes[3].timeout: must be positive, not -1s",
				"x.yaml: redis_url: required with enqueue routes like \"b\"; set it here or in REDIS_URL",
			},
		},
		{
			name: "route conflicts",
			yaml: minimal + "routes:\n" +
				"  - {name: a, methods: [POST], path: /x, upstream: http://u}\n" +
				"  - {name: a, methods: [GET], path: /x, upstream: http://u}\n" +
				"  - {name: c, methods: [get, PUT], path: /x, upstream: http://u}\n" +
				"  - {name: d, path_prefix: /x, upstream: http://u}\n" +
				"  - {name: e, path_prefix: /x, upstream: http://u}\n",
			want: []string{
				`x.yaml:6: routes[1].name: "a" is also the name of routes[0]`,
				`x.yaml:7: routes[2].path: GET /x is already routed by routes[1] ("a")`,
				`x.yaml:9: routes[4].path_prefix: every method of /x is already routed by routes[3] ("d")`,
			},
		},
		{
			name: "enqueue routes",
			yaml: minimal + "redis_url: redis://r:6379\nworker: {queues: {critical: 5, bulk: 0}}\nroutes:\n" +
				"  - {name: a, path: /a, enqueue: {task: invoice.create}}\n" +
				"  - {name: b, methods: [POST, PUT], path: /b, enqueue: {task: Payment.Charge, queue: critical}, timeout: 1s}\n" +
				"  - {name: c, methods: [POST], path: /c, enqueue: {queue: \"bad queue\"}}\n",
			want: []string{
				`x.yaml:5: worker.queues.bulk: priority must be positive, not 0`,
				`x.yaml:7: routes[0].enqueue.queue: "default" is not in worker.queues, so no worker would run its jobs`,
				"x.yaml:7: routes[0].methods: required on an enqueue route: list the methods that enqueue (each must need an Idempotency-Key)",
				`x.yaml:8: routes[1].enqueue.task: "Payment.Charge" is not a declared job; declare it under jobs`,
				"x.yaml:8: routes[1].timeout: applies to upstream routes only",
				"x.yaml:8: routes[1].methods: PUT would enqueue without an Idempotency-Key (idempotency.methods: [POST, PATCH])",
				"x.yaml:9: routes[2].enqueue.task: required: the task of a job declared under jobs",
				`x.yaml:9: routes[2].enqueue.queue: "bad queue" is not a queue name (letters, digits, '_', '.', ':' and '-')`,
			},
		},
		{
			name: "listeners and worker numbers",
			yaml: "store: memory\nauth: {mode: none}\nlisten: \"0.0.0.0:9090\"\nadmin_listen: 127.0.0.1:9090\nadmin_token_sha256: " + key + "\n" +
				"worker: {admin_listen: \"localhost:http\", concurrency: -2, max_attempts: -1, lock_ttl: -1s, queues: {}}\n",
			want: []string{
				`x.yaml:4: admin_listen: "127.0.0.1:9090" uses the same port as listen "0.0.0.0:9090"`,
				`x.yaml:6: worker.admin_listen: "localhost:http": port "http" is not a number in 0..65535`,
				"x.yaml:6: worker.concurrency: must be positive, not -2",
				"x.yaml:6: worker.lock_ttl: must be positive, not -1s",
				"x.yaml:6: worker.max_attempts: must be positive, not -1",
				"x.yaml:6: worker.queues: needs at least one queue (default: {default: 1})",
			},
		},
		{
			name: "a reference on a line of its own",
			yaml: minimal + "problem_base:\n  ${BASE}\n",
			want: []string{"x.yaml:5: problem_base: ${BASE} is not set and has no default (write ${BASE:-default} for one)"},
		},
		{
			name: "the admin token",
			yaml: "store: memory\nauth: {mode: none}\nadmin_token_sha256: " + key[:60] + "zzzz\n",
			want: []string{"x.yaml:3: admin_token_sha256: must be the hex SHA-256 of the secret (64 hex digits); this value has 64 characters"},
		},
		{
			name: "server, proxy and janitor numbers",
			yaml: minimal + "server: {write_timeout: -1s, max_header_bytes: -1}\nproxy: {max_idle_conns_per_host: -1}\njanitor: {batch: -1}\n" + route,
			want: []string{
				"x.yaml:4: server.write_timeout: must be positive, not -1s",
				"x.yaml:4: server.max_header_bytes: must be positive, not -1",
				"x.yaml:5: proxy.max_idle_conns_per_host: must be positive, not -1",
				"x.yaml:6: janitor.batch: must be positive, not -1",
			},
		},
		{
			name: "the drain delay is part of the shutdown timeout",
			yaml: minimal + "server: {drain_delay: 30s}\n" + route,
			want: []string{"x.yaml:4: server.drain_delay: 30s must be shorter than server.shutdown_timeout (30s), which bounds the whole shutdown: the drain delay and then the requests still in flight"},
		},
		{
			name: "the longest wait for a job is shorter than the write timeout",
			yaml: minimal + "server: {write_timeout: 20s}\njobs_api: {max_wait: 20s}\n" + route,
			want: []string{"x.yaml:5: jobs_api.max_wait: 20s must be shorter than server.write_timeout (20s), which would cut a waiting GET /v1/jobs/{id} before it answers"},
		},
		{
			name: "the default longest wait for a job against a short write timeout",
			yaml: minimal + "server: {write_timeout: 10s}\n" + route,
			want: []string{"x.yaml: jobs_api.max_wait: 30s must be shorter than server.write_timeout (10s), which would cut a waiting GET /v1/jobs/{id} before it answers"},
		},
		{
			name: "a negative longest wait for a job",
			yaml: minimal + "jobs_api: {max_wait: -1s}\n" + route,
			want: []string{"x.yaml:4: jobs_api.max_wait: must be positive, not -1s"},
		},
		{
			name: "auth.cross_site is refuse or allow",
			yaml: "store: memory\nadmin_listen: \"\"\nauth: {mode: header, cross_site: block}\ntenants:\n  - name: acme\n" + route,
			want: []string{`x.yaml:3: auth.cross_site: "block" is neither refuse nor allow`},
		},
		{
			name: "negative bounds on job waits",
			yaml: minimal + "jobs_api: {max_waiters: -1, max_waiters_per_tenant: -2}\n" + route,
			want: []string{
				"x.yaml:4: jobs_api.max_waiters: must be positive, not -1",
				"x.yaml:4: jobs_api.max_waiters_per_tenant: must be positive, not -2",
			},
		},
		{
			name: "a payload nesting bound past what JSON readers take",
			yaml: minimal + "jobs_api: {max_depth: 10001}\n" + route,
			want: []string{"x.yaml:4: jobs_api.max_depth: 10001 is outside 1..10000"},
		},
		{
			name: "a negative drain delay",
			yaml: minimal + "server: {drain_delay: -1s, shutdown_timeout: 10s}\n" + route,
			want: []string{"x.yaml:4: server.drain_delay: must be 0s or more, not -1s"},
		},
		{
			name: "a negative max_in_flight",
			yaml: minimal + "server: {max_in_flight: -1}\n" + route,
			want: []string{"x.yaml:4: server.max_in_flight: must be positive, not -1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantProblems(t, tc.yaml, "x.yaml", tc.want, WithDefaultJobs(exampleJobs(t)))
		})
	}
}
