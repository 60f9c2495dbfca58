// Command idemgate is the idempotency gateway: `idemgate serve` runs it,
// `idemgate worker` runs its job workers, and the other subcommands manage
// the schema, the configuration, idempotency records, dead letters and
// jobs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is a mistake in how the command was called or configured:
// exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errHelp: --help was asked for and printed; exit 0.
var errHelp = errors.New("help shown")

// loggedError is an error the command has already logged in its log's
// format: exitCode only turns it into the exit code.
type loggedError struct{ err error }

func (e *loggedError) Error() string { return e.err.Error() }
func (e *loggedError) Unwrap() error { return e.err }

func exitCode(err error, stderr io.Writer) int {
	var (
		ue     *usageError
		le     *loggedError
		logged = errors.As(err, &le)
	)
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		if !logged {
			fmt.Fprintln(stderr, "idemgate:", err)
		}
		return 2
	default:
		if !logged {
			fmt.Fprintln(stderr, "idemgate:", err)
		}
		return 1
	}
}

const usage = `idemgate — an HTTP gateway that makes retries safe

Usage:
  idemgate serve   --config FILE        run the gateway
  idemgate worker  --config FILE        run the job workers
  idemgate dev     --config FILE        gateway + worker + partnersim in one process
  idemgate migrate up|down|status --config FILE
  idemgate keys    get|delete|resolve TENANT ROUTE KEY --config FILE
  idemgate config  check --config FILE  validate a config, printing every problem
  idemgate dlq     list|replay|delete [JOB_ID...] --config FILE
  idemgate jobs    requeue JOB_ID... --config FILE
  idemgate reconcile --config FILE      check the business invariants and stuck jobs
  idemgate explain --config FILE (--job JOB_ID | --key TENANT ROUTE KEY) [--json]
                                        the story of a job or key: record, attempts, effects, verdict

Every command takes --help. Exit codes: 0 ok, 1 failure, 2 usage or config error.
`

// run is the whole program: main only wires the process to it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usagef("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, getenv, stdout, stderr)
	case "keys":
		return runKeys(ctx, rest, getenv, stdout, stderr)
	case "config":
		return runConfig(ctx, rest, getenv, stdout, stderr)
	case "worker":
		return runWorker(ctx, rest, getenv, stdout, stderr)
	case "dev":
		return runDev(ctx, rest, getenv, stdout, stderr)
	case "dlq":
		return runDLQ(ctx, rest, getenv, stdout, stderr)
	case "jobs":
		return runJobs(ctx, rest, getenv, stdout, stderr)
	case "reconcile":
		return runReconcile(ctx, rest, getenv, stdout, stderr)
	case "explain":
		return runExplain(ctx, rest, getenv, stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return usagef("unknown command %q", cmd)
	}
}
