package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

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
				return c.Tenants[0].Name == "t-prod" && *c.Tenants[0].RateLimit == RateLimit{Tokens: 7, Interval: 2 * time.Second}
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
			var ps *Errors
			if !errors.As(err, &ps) || len(ps.List) == 0 {
				t.Fatalf("error %v is not a non-empty *Errors", err)
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
			d := cfg.Routes[i].Idempotency
			if d.Lease <= 0 || d.Lease > d.Retention || d.MaxKeyLength < 1 || d.MaxRequestBytes <= 0 {
				t.Fatalf("route %d: accepted settings %+v", i, d)
			}
		}
	})
}
