package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// cli runs one command line as the binary would and returns its exit code.
func cli(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	code = ExitCode(err, &errOut)
	return code, out.String(), errOut.String()
}

func TestCLIUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "no command given"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"help", []string{"--help"}, 0, "Usage:"},
		{"serve help", []string{"serve", "--help"}, 0, "--config"},
		{"serve without config", []string{"serve"}, 2, "--config FILE is required"},
		{"bad flag", []string{"serve", "--nope"}, 2, "flag provided but not defined"},
		{"missing config file", []string{"config", "check", "--config", "/nonexistent.yaml"}, 2, "no such file"},
		{"keys without a scope", []string{"keys", "get", "acme"}, 2, "TENANT ROUTE KEY"},
		{"explain without a subject", []string{"explain", "--config", "x"}, 2, "want --job JOB_ID or --key TENANT ROUTE KEY"},
		{"explain with both", []string{"explain", "--job", "j", "--key", "a", "b", "c"}, 2, "give --job or --key, not both"},
		{"explain key short", []string{"explain", "--key", "acme", "payments"}, 2, "--key wants TENANT ROUTE KEY, got 2 argument(s)"},
		{"explain job extra", []string{"explain", "--job", "j", "extra"}, 2, "--job takes one job id"},
		{"explain without config", []string{"explain", "--job", "j"}, 2, "--config FILE is required"},
		{"explain help", []string{"explain", "--help"}, 0, "--key TENANT ROUTE KEY"},
		{"keys bad operation", []string{"keys", "burn", "a", "b", "c", "--config", "x"}, 2, `unknown operation "burn"`},
		{"migrate without action", []string{"migrate"}, 2, "up, down, status"},
		{"dlq without action", []string{"dlq"}, 2, "list, replay or delete"},
		{"jobs without action", []string{"jobs"}, 2, "jobs: want list, or requeue or cancel followed by job ids"},
		{"jobs bad operation", []string{"jobs", "retry", "job_1", "--config", "x"}, 2, `jobs: unknown operation "retry" (want list, requeue or cancel)`},
		{"jobs list with an argument", []string{"jobs", "list", "acme", "--config", "x"}, 2, `jobs list: takes no arguments, only flags (got "acme")`},
		{"jobs list bad status and limit", []string{"jobs", "list", "--status", "done", "--limit", "0", "--config", "x"}, 2,
			`jobs list: --status: "done" is not a job status: one of scheduled, queued, processing, retrying, cancelling, succeeded, failed, cancelled; --limit: a whole number from 1 to 500, not "0"`},
		{"jobs list bad time", []string{"jobs", "list", "--created-after", "yesterday", "--config", "x"}, 2, `jobs list: --created-after: "yesterday" is not a time in RFC 3339`},
		{"jobs cancel with a list flag", []string{"jobs", "cancel", "job_1", "--status", "queued", "--config", "x"}, 2, "jobs cancel: --status is a flag of jobs list"},
		{"jobs requeue without ids", []string{"jobs", "requeue", "--config", "x"}, 2, "jobs requeue: name at least one job id"},
		{"jobs list with a reason", []string{"jobs", "list", "--reason", "x", "--config", "x"}, 2, "jobs list: --reason is a flag of jobs requeue and jobs cancel"},
		{"dlq cancel with a reason too long", []string{"dlq", "delete", "job_1", "--reason", strings.Repeat("x", 1001), "--config", "x"}, 2, "dlq delete: --reason is at most 1000 bytes of UTF-8"},
		{"jobs cancel without ids", []string{"jobs", "cancel", "--config", "x"}, 2, "jobs cancel: name at least one job id"},
		{"jobs cancel without config", []string{"jobs", "cancel", "job_1"}, 2, "--config FILE is required"},
		{"jobs help", []string{"jobs", "--help"}, 0, "requeue|cancel JOB_ID... --config FILE"},
		{"bad log format", []string{"serve", "--config", "x.yaml", "--log-format", "xml"}, 2, `--log-format "xml": want json or text`},
		{"bad log level", []string{"worker", "--config", "x.yaml", "--log-level", "loud"}, 2, `--log-level "loud"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, nil, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d (want %d); output %q lacks %q", code, tc.code, out+errOut, tc.want)
			}
		})
	}
}

// A command's --help prints its help once, on stdout.
func TestCLIHelpOnce(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"serve", "worker", "dev", "migrate", "keys", "config", "dlq", "jobs", "reconcile", "explain"} {
		code, out, errOut := cli(t, nil, name, "--help")
		if code != 0 || strings.Count(out, "Usage: idemgate "+name) != 1 || errOut != "" {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q; want the help once on stdout", name, code, out, errOut)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	code, out, _ := cli(t, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "REDIS_URL": "redis://127.0.0.1:6379/0"},
		"config", "check", "--config", "../../deploy/local/idemgate.yaml")
	if code != 0 || !strings.Contains(out, "ok (6 routes, 5 jobs, 1 tenants, store postgres)") {
		t.Fatalf("example config: exit %d, %q", code, out)
	}
	code, _, errOut := cli(t, nil, "config", "check", "--config", "../../config/testdata/broken.yaml")
	want, err := os.ReadFile("../../config/testdata/broken.golden")
	if err != nil {
		t.Fatal(err)
	}
	if code != 2 {
		t.Fatalf("broken config: exit %d, want 2", code)
	}
	// Every problem is printed, one per line, as the config package reports them.
	for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		if !strings.Contains(errOut, line) {
			t.Errorf("config check output lacks %q", line)
		}
	}
}

// A declared job that neither deliver.http nor a Go handler of this binary
// can run: the worker refuses to start (exit 2, naming it), and so does
// config check.
func TestWorkerRefusesJobsNoWorkerRuns(t *testing.T) {
	t.Parallel()
	cfg := `database_url: postgres://x@127.0.0.1:1/db
redis_url: redis://127.0.0.1:1/0
admin_listen: ""
auth: {mode: none}
jobs:
  - task: label.print
    schema: {type: object, required: [order_id], properties: {order_id: {type: string}}}
    business_key: "label:{order_id}"
routes:
  - {name: labels, methods: [POST], path: /v1/labels, enqueue: {task: label.print}}
`
	path := writeFile(t, "labels.yaml", cfg)
	for _, args := range [][]string{{"worker", "--config", path}, {"config", "check", "--config", path}} {
		code, _, errOut := cli(t, nil, args...)
		if code != 2 || !strings.Contains(errOut, `"label.print"`) || !strings.Contains(errOut, "deliver.http") {
			t.Errorf("%s: exit %d, %q; want 2 naming label.print", args[0], code, errOut)
		}
	}
}
