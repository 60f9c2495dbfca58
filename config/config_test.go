package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the problems reported now")

// env is a getenv over a fixed map.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

var runEnv = map[string]string{
	"DATABASE_URL": "postgres://idemgate:secret@127.0.0.1:5432/idemgate?sslmode=disable",
	"REDIS_URL":    "redis://127.0.0.1:6379/0",
}

// minimal is a valid configuration that needs no services; cases append to it.
const minimal = `store: memory
admin_listen: ""
auth: {mode: none}
`

func problems(t *testing.T, err error) []Problem {
	t.Helper()
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %v (%T) is not a *Problems", err, err)
	}
	return ps.List
}

func TestLoadValid(t *testing.T) {
	t.Parallel()
	cfg, err := Load("testdata/valid.yaml", env(runEnv), WithDefaultJobs(exampleJobs(t)))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("Warnings() = %q, want none", w)
	}
	sec := func(n int) Duration { return Duration(time.Duration(n) * time.Second) }
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, ":8080"},
		{"admin_token_sha256 (default of ${ADMIN_TOKEN_SHA256:-…})", cfg.AdminTokenSHA256, "1734d503f6aa6a047c36d113cbad769f719c93784b469b771c4c3e7c63adbefd"},
		{"database_url from the environment", cfg.DatabaseURL, runEnv["DATABASE_URL"]},
		{"redis_url from the environment", cfg.RedisURL, runEnv["REDIS_URL"]},
		{"default problem_base", cfg.ProblemBase, "https://idemgate.dev/problems/"},
		{"default rate_limit_store", cfg.RateLimitStore, "memory"},
		{"default log", cfg.Log, Log{Level: "info", Format: "json"}},
		{"default janitor", cfg.Janitor, Janitor{Interval: sec(60), Batch: 1000}},
		{"default proxy", cfg.Proxy, Proxy{DialTimeout: sec(5), ResponseHeaderTimeout: sec(30), IdleConnTimeout: sec(90), MaxIdleConnsPerHost: 256}},
		{"default server", cfg.Server, Server{ReadHeaderTimeout: sec(10), ReadTimeout: sec(60), WriteTimeout: sec(120), IdleTimeout: sec(120), MaxHeaderBytes: 65536, ShutdownTimeout: sec(30)}},
		{"default worker.shutdown_timeout", cfg.Worker.ShutdownTimeout, sec(30)},
		{"worker.queues", len(cfg.Worker.Queues) == 1 && cfg.Worker.Queues["default"] == 1, true},
		{"tenants", len(cfg.Tenants), 2},
		{"acme's rate limit", *cfg.Tenants[0].RateLimit, RateLimit{Tokens: 100, Interval: sec(1)}},
		{"globex is not limited", cfg.Tenants[1].RateLimit == nil, true},
		{"routes", len(cfg.Routes), 6},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	for _, tc := range []struct {
		route, task, path string
	}{
		{"invoices", "invoice.create", "/v1/invoices"},
		{"inventory-adjustments", "inventory.adjust", "/v1/inventory/adjustments"},
		{"payment-charges", "payment.charge", "/v1/payments/charges"},
		{"notifications", "notification.send", "/v1/notifications"},
	} {
		r, ok := cfg.Route(tc.route)
		if !ok {
			t.Errorf("Route(%q) not found", tc.route)
			continue
		}
		if r.Enqueue == nil || r.Enqueue.Task != tc.task || r.Enqueue.Queue != "default" || r.Path != tc.path {
			t.Errorf("Route(%q): path %q, enqueue %+v; want %s → %s on queue default", tc.route, r.Path, r.Enqueue, tc.path, tc.task)
		}
	}
	payments, ok := cfg.Route("payments")
	if !ok || payments.Upstream != "http://127.0.0.1:9100" || payments.PathPrefix != "/v1/payments" || payments.Timeout != sec(10) {
		t.Errorf("Route(payments) = %+v, %v", payments, ok)
	}
	if _, ok := cfg.Route("nope"); ok {
		t.Error(`Route("nope") found a route`)
	}

	defaults := Idempotency{
		Methods: []string{"POST", "PATCH"}, KeySyntax: "compat", MaxKeyLength: 255,
		Retention: sec(24 * 3600), Lease: sec(30), WaitInFlight: 0,
		MaxRequestBytes: 1 << 20, MaxStoredResponseBytes: 1 << 20,
		Fingerprint:  Fingerprint{Headers: []string{}, JSONFields: []string{}},
		OnStoreError: "fail_closed", OnAmbiguous: "release",
	}
	for _, tc := range []struct {
		route  string
		change func(*Idempotency)
	}{
		{"invoices", func(*Idempotency) {}},
		{"payments", func(d *Idempotency) { d.WaitInFlight = sec(2) }},
		{"notifications", func(d *Idempotency) { d.Retention = sec(72 * 3600) }},
		{"inventory-adjustments", func(d *Idempotency) {
			d.Fingerprint.JSONFields = []string{"/adjustment_id", "/sku", "/delta"}
		}},
	} {
		want := defaults
		want.Methods = slices.Clone(defaults.Methods)
		tc.change(&want)
		r, _ := cfg.Route(tc.route)
		if got := r.Idempotency(); !equalIdempotency(got, want) {
			t.Errorf("Route(%q).Idempotency() =\n %+v\nwant\n %+v", tc.route, got, want)
		}
	}
}

func equalIdempotency(a, b Idempotency) bool {
	return slices.Equal(a.Methods, b.Methods) &&
		slices.Equal(a.Fingerprint.Headers, b.Fingerprint.Headers) &&
		slices.Equal(a.Fingerprint.JSONFields, b.Fingerprint.JSONFields) &&
		a.KeySyntax == b.KeySyntax && a.MaxKeyLength == b.MaxKeyLength &&
		a.Retention == b.Retention && a.Lease == b.Lease && a.WaitInFlight == b.WaitInFlight &&
		a.MaxRequestBytes == b.MaxRequestBytes && a.MaxStoredResponseBytes == b.MaxStoredResponseBytes &&
		a.OnStoreError == b.OnStoreError && a.OnAmbiguous == b.OnAmbiguous
}

func TestDefaultsOfAnEmptyFile(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal), "min.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg.Listen != ":8080" || cfg.Store != "memory" || cfg.Auth.Header != "Authorization" {
		t.Errorf("listen %q, store %q, auth.header %q", cfg.Listen, cfg.Store, cfg.Auth.Header)
	}
	if cfg.AdminListen != "" {
		t.Errorf(`admin_listen: "" gave %q, want the admin listener off`, cfg.AdminListen)
	}
	if cfg.Worker.AdminListen != "127.0.0.1:9091" || cfg.Worker.Concurrency != 10 || cfg.Worker.MaxAttempts != 10 ||
		cfg.Worker.LockTTL != Duration(30*time.Second) || cfg.Worker.PartnerURL != "http://127.0.0.1:9100" {
		t.Errorf("worker defaults: %+v", cfg.Worker)
	}
	d := cfg.Idempotency
	if !slices.Equal(d.Methods, []string{"POST", "PATCH"}) || d.Lease != Duration(30*time.Second) || d.Retention != Duration(24*time.Hour) {
		t.Errorf("idempotency defaults: %+v", d)
	}

	// Without the key, the admin listener is on and needs a token.
	_, err = Parse([]byte("store: memory\nauth: {mode: none}\n"), "admin.yaml", nil)
	if err == nil || !strings.Contains(err.Error(), "admin.yaml: admin_token_sha256: required while admin_listen is set") {
		t.Errorf("no admin_listen key and no token: err = %v", err)
	}
}

func TestRouteOverrides(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal+`idempotency:
  methods: [post]
  lease: 10s
  fingerprint: {headers: [X-Account]}
routes:
  - name: open
    path: /open
    upstream: http://127.0.0.1:1
    idempotency: {methods: [], on_store_error: fail_open}
  - name: strict
    path: /strict
    upstream: http://127.0.0.1:1
    idempotency:
      key_syntax: strict
      wait_in_flight: 1s
      max_request_bytes: 10
      fingerprint: {json_fields: [/id]}
      on_ambiguous: hold
`), "overrides.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	open, _ := cfg.Route("open")
	if got := open.Idempotency(); len(got.Methods) != 0 || got.OnStoreError != "fail_open" || got.Lease != Duration(10*time.Second) {
		t.Errorf("open: %+v; want no methods, fail_open and the default lease 10s", got)
	}
	strict, _ := cfg.Route("strict")
	got := strict.Idempotency()
	if !slices.Equal(got.Methods, []string{"POST"}) || got.KeySyntax != "strict" || got.WaitInFlight != Duration(time.Second) ||
		got.MaxRequestBytes != 10 || got.OnAmbiguous != "hold" || got.MaxKeyLength != 255 ||
		!slices.Equal(got.Fingerprint.Headers, []string{"X-Account"}) || !slices.Equal(got.Fingerprint.JSONFields, []string{"/id"}) {
		t.Errorf("strict: %+v", got)
	}
	got.Methods[0] = "DELETE"
	got.Fingerprint.Headers[0] = "X-Other"
	if again := strict.Idempotency(); again.Methods[0] != "POST" || again.Fingerprint.Headers[0] != "X-Account" {
		t.Error("changing the returned settings changed the configuration")
	}
	wantWarnings := []string{
		`auth.mode none: every request is tenant "anonymous"; unsafe for multi-tenant use`,
		"store memory: idempotency records live in this process only; a restart forgets them and other instances never see them",
		"routes[0] (open): on_store_error fail_open: while the store is unavailable requests run without idempotency protection",
		"routes[0] (open): idempotency.methods is empty: no request needs an Idempotency-Key",
	}
	if w := cfg.Warnings(); !slices.Equal(w, wantWarnings) {
		t.Errorf("Warnings() =\n%s\nwant\n%s", strings.Join(w, "\n"), strings.Join(wantWarnings, "\n"))
	}

	// Listeners that only clash when dev runs everything in one process.
	cfg, err = Parse([]byte(minimal+"listen: \":9100\"\nworker: {admin_listen: \"127.0.0.1:9100\"}\n"), "dev.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	wantClashes := []string{
		`worker.admin_listen "127.0.0.1:9100" uses the same port as listen ":9100": idemgate dev cannot open both`,
		`worker.partner_url "127.0.0.1:9100" uses the same port as listen ":9100": idemgate dev cannot open both`,
	}
	if w := cfg.Warnings(); !slices.Equal(w[1:3], wantClashes) {
		t.Errorf("Warnings() = %q, want %q after the auth warning", w, wantClashes)
	}

	// A route built in code, not loaded, inherits the built-in defaults.
	r := &Route{Name: "code", IdempotencyOverride: IdempotencyOverride{Lease: new(Duration(5 * time.Second))}}
	if d := r.Idempotency(); d.Lease != Duration(5*time.Second) || d.Retention != Duration(24*time.Hour) || !slices.Equal(d.Methods, []string{"POST", "PATCH"}) {
		t.Errorf("Route{}.Idempotency() = %+v", d)
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		yaml string
		env  map[string]string
		want func(*Config) bool
		// problem, when set, is the whole error expected.
		problem string
	}{
		{
			name: "expands a reference",
			yaml: minimal + "listen: ${LISTEN}\n",
			env:  map[string]string{"LISTEN": "127.0.0.1:8181"},
			want: func(c *Config) bool { return c.Listen == "127.0.0.1:8181" },
		},
		{
			name: "uses the default when unset",
			yaml: minimal + "listen: ${LISTEN:-:8282}\n",
			want: func(c *Config) bool { return c.Listen == ":8282" },
		},
		{
			name: "prefers the variable over the default",
			yaml: minimal + "listen: ${LISTEN:-:8282}\n",
			env:  map[string]string{"LISTEN": ":8383"},
			want: func(c *Config) bool { return c.Listen == ":8383" },
		},
		{
			name: "expands numbers and inside quotes and lists",
			yaml: minimal + `tenants: [{name: "t-${ENV}", rate_limit: {tokens: ${BURST}, interval: "${EVERY:-2s}"}}]` + "\n",
			env:  map[string]string{"ENV": "prod", "BURST": "7"},
			want: func(c *Config) bool {
				return c.Tenants[0].Name == "t-prod" && *c.Tenants[0].RateLimit == RateLimit{Tokens: 7, Interval: Duration(2 * time.Second)}
			},
		},
		{
			name: "leaves comments and $${ alone",
			yaml: minimal + "# redis_url: ${NOT_SET}\nproblem_base: https://x.example/$${a}/ # ${ALSO_NOT_SET}\n",
			want: func(c *Config) bool { return c.ProblemBase == "https://x.example/${a}/" },
		},
		{
			name: "DATABASE_URL and REDIS_URL replace the file's values",
			yaml: minimal + "database_url: postgres://file@db/file\nredis_url: redis://file:6379\n",
			env:  map[string]string{"DATABASE_URL": "postgres://env@db/env", "REDIS_URL": "db1:7000,db2:7000"},
			want: func(c *Config) bool {
				return c.DatabaseURL == "postgres://env@db/env" && c.RedisURL == "db1:7000,db2:7000"
			},
		},
		{
			name: "DATABASE_URL satisfies store postgres",
			yaml: "admin_listen: \"\"\nauth: {mode: none}\n",
			env:  map[string]string{"DATABASE_URL": "host=/tmp dbname=idemgate"},
			want: func(c *Config) bool { return c.Store == "postgres" && c.DatabaseURL == "host=/tmp dbname=idemgate" },
		},
		{
			name:    "an unset variable without a default is a problem",
			yaml:    minimal + "listen: ${LISTEN}\n",
			problem: "env.yaml:4: listen: ${LISTEN} is not set and has no default (write ${LISTEN:-default} for one)",
		},
		{
			name:    "names the key of the reference in a flow mapping",
			yaml:    minimal + "tenants: [{name: a, rate_limit: {tokens: 1, interval: ${EVERY}}}]\n",
			problem: "env.yaml:4: tenants[0].rate_limit.interval: ${EVERY} is not set and has no default (write ${EVERY:-default} for one)",
		},
		{
			name:    "a bad environment value is blamed on the variable",
			yaml:    minimal,
			env:     map[string]string{"REDIS_URL": "http://cache:6379"},
			problem: `env.yaml: redis_url: scheme "http" is not redis or rediss (or use a comma list of host:port cluster nodes) (from REDIS_URL)`,
		},
		{
			name:    "malformed references",
			yaml:    minimal + "listen: ${1X}\nproblem_base: ${OPEN\n",
			problem: "env.yaml:4: listen: \"1X\" is not a variable name (use ${NAME} or ${NAME:-default})\nenv.yaml:5: problem_base: \"${OPEN\" has no closing }",
		},
		{
			name:    "a value with a line break cannot be expanded",
			yaml:    minimal + "listen: ${LISTEN}\n",
			env:     map[string]string{"LISTEN": ":1\nstore: redis"},
			problem: "env.yaml:4: listen: ${LISTEN} holds a line break; only one-line values can be expanded",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(tc.yaml), "env.yaml", env(tc.env))
			if tc.problem != "" {
				if err == nil || err.Error() != tc.problem {
					t.Fatalf("err =\n%v\nwant\n%s", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !tc.want(cfg) {
				t.Errorf("unexpected config: %+v", cfg)
			}
		})
	}
}

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{
			name: "top level, with a suggestion",
			yaml: minimal + "idempotancy:\n  lease: 10s\n",
			want: `k.yaml:4: idempotancy: unknown key; did you mean "idempotency"?`,
		},
		{
			name: "inside a route's idempotency block",
			yaml: minimal + "routes:\n  - name: a\n    path: /a\n    upstream: http://u\n    idempotency:\n      leese: 1m\n",
			want: `k.yaml:9: routes[0].idempotency.leese: unknown key; did you mean "lease"?`,
		},
		{
			name: "in a flow mapping, nothing close",
			yaml: minimal + "tenants: [{name: a, burst: 3}]\n",
			want: `k.yaml:4: tenants[0].burst: unknown key`,
		},
		{
			name: "a key written twice",
			yaml: minimal + "listen: :1\nlisten: :2\n",
			want: `k.yaml:5: listen: set twice (first on line 4)`,
		},
		{
			name: "a key written twice in a route",
			yaml: minimal + "routes:\n  - name: a\n    path: /a\n    path: /b\n    upstream: http://u\n  - {name: b, path: /b}\n",
			// The decoder skips the route, so the routes are not validated.
			want: "k.yaml:7: routes[0].path: set twice (first on line 6)",
		},
		{
			name: "an empty list entry",
			yaml: minimal + "routes:\n  -\n  - {name: b, path: /b, upstream: http://u}\ntenants: [a, {name: t}]\n",
			want: "k.yaml:5: routes[0]: is an empty entry\nk.yaml:7: tenants[0]: must be a mapping, not \"a\"",
		},
		{
			name: "several at once",
			yaml: minimal + "lisen: :1\nworker:\n  concurency: 3\n",
			want: "k.yaml:4: lisen: unknown key; did you mean \"listen\"?\nk.yaml:6: worker.concurency: unknown key; did you mean \"concurrency\"?",
		},
		{
			name: "a key that is not a plain name is quoted",
			yaml: minimal + "worker:\n  \"con currency\": 3\n",
			want: `k.yaml:5: worker."con currency": unknown key; did you mean "concurrency"?`,
		},
		{
			name: "merged in from an anchor",
			yaml: minimal + "x: &d {lease: 1s}\n",
			want: "k.yaml:4: x: unknown key",
		},
		{
			name: "merged into the wrong block",
			yaml: minimal + "idempotency: &d {lease: 1s}\nworker:\n  <<: *d\n",
			want: "k.yaml:4: worker.lease: unknown key",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.yaml), "k.yaml", nil)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err =\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

func TestValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"a bare number is not a duration", "idempotency: {lease: 30}", `v.yaml:4: idempotency.lease: "30" is not a duration (use 30s)`},
		{"quoted bare number", `idempotency: {lease: "30"}`, `v.yaml:4: idempotency.lease: "30" is not a duration (use 30s)`},
		{"days", "idempotency: {retention: 7d}", `v.yaml:4: idempotency.retention: "7d" is not a duration (use 168h)`},
		{"words", "janitor: {interval: often}", `v.yaml:4: janitor.interval: "often" is not a duration (use a Go duration such as 30s, 5m or 1h30m)`},
		{"a list for a duration", "proxy: {dial_timeout: [1s]}", `v.yaml:4: proxy.dial_timeout: must be a duration such as 30s, not a list`},
		{"words for a number", "server: {max_header_bytes: lots}", `v.yaml:4: server.max_header_bytes: "lots" is not an integer`},
		{"a mapping for a string", "listen: {port: 80}", `v.yaml:4: listen: must be a string, not a mapping`},
		{"a string for a list", "tenants: acme", `v.yaml:4: tenants: must be a list, not "acme"`},
		{"a string for a mapping", "log: debug", `v.yaml:4: log: must be a mapping, not "debug"`},
		{"not a mapping at all", "- a\n- b", `v.yaml:1: the file must be a mapping of keys (listen, store, routes, ...), not a list`},
		{"YAML syntax", "listen: [", `v.yaml:4: did not find expected node content`},
		{"two documents", "---\nlisten: :1\n", `v.yaml:4: a second YAML document; the file must hold exactly one`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := minimal + tc.yaml + "\n"
			if strings.HasPrefix(tc.yaml, "- ") {
				data = tc.yaml + "\n"
			}
			_, err := Parse([]byte(data), "v.yaml", nil)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err =\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

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
			yaml: minimal + "log: {level: trace, format: xml}\nrate_limit_store: disk\nidempotency: {key_syntax: loose, on_store_error: ignore}\n",
			want: []string{
				`x.yaml:4: log.level: "trace" is not debug, info, warn or error`,
				`x.yaml:4: log.format: "xml" is not json or text`,
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
				`x.yaml:14: routes[0].idempotency.fingerprint.json_fields[0]: "order_id" is not a JSON Pointer (like /order_id)`,
				`x.yaml:14: routes[0].idempotency.fingerprint.json_fields[1]: "/a~2": ~ must be followed by 0 or 1`,
				`x.yaml:15: routes[0].idempotency.methods[0]: "GE T" is not an HTTP method`,
			},
		},
		{
			name: "a route's shorter retention is checked against the inherited lease",
			yaml: minimal + "routes:\n  - {name: r, path: /r, upstream: http://u, idempotency: {retention: 10s}}\n",
			want: []string{"x.yaml:5: routes[0].idempotency.retention: 10s is shorter than lease 30s"},
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
				"worker: {admin_listen: \"localhost:http\", concurrency: -2, max_attempts: -1, lock_ttl: -1s, queues: {}, partner_url: \"127.0.0.1:9100\"}\n",
			want: []string{
				`x.yaml:4: admin_listen: "127.0.0.1:9090" uses the same port as listen "0.0.0.0:9090"`,
				`x.yaml:6: worker.admin_listen: "localhost:http": port "http" is not a number in 0..65535`,
				"x.yaml:6: worker.concurrency: must be positive, not -2",
				"x.yaml:6: worker.lock_ttl: must be positive, not -1s",
				"x.yaml:6: worker.max_attempts: must be positive, not -1",
				`x.yaml:6: worker.partner_url: "127.0.0.1:9100" is not an http:// or https:// URL with a host`,
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.yaml), "x.yaml", nil, WithDefaultJobs(exampleJobs(t)))
			if err == nil {
				t.Fatal("Parse accepted the configuration")
			}
			got := strings.Split(err.Error(), "\n")
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "f.yaml", Line: 3, Key: "a.b", Message: "bad"}, "f.yaml:3: a.b: bad"},
		{Problem{File: "f.yaml", Key: "a.b", Message: "bad"}, "f.yaml: a.b: bad"},
		{Problem{File: "f.yaml", Line: 3, Message: "bad"}, "f.yaml:3: bad"},
		{Problem{Key: "a", Message: "bad"}, "a: bad"},
	} {
		if got := tc.p.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.p, got, tc.want)
		}
	}

	_, err := Parse([]byte("store: mongo\nlisten: nope\n"), "f.yaml", nil)
	list := problems(t, err)
	if len(list) < 2 {
		t.Fatalf("problems = %v, want at least store and listen", list)
	}
	var first Problem
	if !errors.As(err, &first) || first != list[0] {
		t.Errorf("errors.As(err, *Problem) = %+v, want the first problem %+v", first, list[0])
	}
	if list[0].Key != "store" || list[0].Line != 1 || list[1].Key != "listen" || list[1].Line != 2 {
		t.Errorf("problems out of file order: %v", list)
	}

	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want os.ErrNotExist", err)
	}
}

// TestBroken checks the report for a file with many mistakes against
// testdata/broken.golden; go test -update rewrites it.
func TestBroken(t *testing.T) {
	t.Parallel()
	// The options of idemgate config check, whose output the command's
	// own tests compare with the same golden file.
	_, err := Load("testdata/broken.yaml", env(map[string]string{"DATABASE_URL": "", "UNUSED": "x"}),
		WithDefaultJobs(exampleJobs(t)), WithHandlers(exampleTasks...))
	list := problems(t, err)
	if len(list) < 8 {
		t.Fatalf("%d problems, want at least 8:\n%v", len(list), err)
	}
	got := err.Error() + "\n"
	const golden = "testdata/broken.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("problems differ from %s (go test -update rewrites it):\ngot:\n%swant:\n%s", golden, got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/valid.yaml", "testdata/broken.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(minimal))
	f.Add([]byte(minimal + "routes:\n  - {name: a, path: /a, upstream: http://u, idempotency: {lease: ${L:-1s}}}\n"))
	f.Add([]byte("a: &x [*x]\n<<: *x\n"))
	f.Add([]byte("idempotency: &d {lease: 1s}\nworker:\n  <<: [*d, *d]\n"))
	getenv := env(map[string]string{"L": "2s", "N": "3", "DATABASE_URL": "postgres://db/x"})
	defaults := WithDefaultJobs(exampleJobs(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "testdata/fuzz.yaml", getenv, defaults)
		if err != nil {
			var ps *Problems
			if !errors.As(err, &ps) || len(ps.List) == 0 {
				t.Fatalf("error %v is not a non-empty *Problems", err)
			}
			for _, p := range ps.List {
				if strings.ContainsAny(p.Message, "\r\n") || strings.ContainsAny(p.Key, "\r\n") {
					t.Fatalf("problem spans lines: %q", p.Error())
				}
			}
			return
		}
		if cfg == nil {
			t.Fatal("nil config without an error")
		}
		cfg.Warnings()
		for i := range cfg.Routes {
			if e := cfg.Routes[i].Enqueue; e != nil {
				if _, ok := cfg.Job(e.Task); !ok {
					t.Fatalf("route %d: accepted task %q without a job", i, e.Task)
				}
			}
			d := cfg.Routes[i].Idempotency()
			if d.Lease <= 0 || d.Lease > d.Retention || d.MaxKeyLength < 1 || d.MaxRequestBytes <= 0 {
				t.Fatalf("route %d: accepted settings %+v", i, d)
			}
		}
	})
}
