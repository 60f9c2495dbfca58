package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/idemgate/idemgate/extension"
)

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

// ExitCode is the exit code of a command that ended with err: 0 for nil
// and for --help, 2 for a usage or configuration error, else 1. An error
// the command has not logged is printed on stderr first.
func ExitCode(err error, stderr io.Writer) int {
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

// command is a subcommand: how the usage text shows it and the function
// that runs it.
type command struct {
	name          string
	args, summary string // its line in the usage text; summary may be empty
	run           func(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error
}

// commands is every subcommand, in the order the usage text lists them:
// adding a command here is all it takes to run it and to show it.
func commands(ext extension.Set) []command {
	dev := "gateway + worker"
	for _, d := range ext.DevServers {
		dev += " + " + d.Name
	}
	return []command{
		{"serve", "--config FILE", "run the gateway", runServe},
		{"worker", "--config FILE", "run the job workers", runWorker},
		{"dev", "--config FILE", dev + " in one process", runDev},
		{"migrate", "up|down|status --config FILE", "", runMigrate},
		{"keys", "get|delete|resolve TENANT ROUTE KEY --config FILE", "", runKeys},
		{"config", "check --config FILE", "validate a config, printing every problem", runConfig},
		{"dlq", "list|replay|delete [JOB_ID...] --config FILE", "", runDLQ},
		{"jobs", "list [--json] | requeue|cancel JOB_ID... --config FILE", "", runJobs},
		{"pause", "--task T | --queue Q | --limit NAME [--key K] [--until T] --config FILE", "pause a task, a queue or a limit key value", runPause},
		{"resume", "--task T | --queue Q | --limit NAME [--key K] [--ramp P%/D] --config FILE", "resume paused work, at once or gradually", runResume},
		{"reconcile", "--config FILE", "check the business invariants and stuck jobs", runReconcile},
		{"explain", "--config FILE (--job JOB_ID | --key TENANT ROUTE KEY | --batch BATCH_ID) [--json]", "the story of a job, key or batch: record, attempts, effects, verdict", runExplain},
	}
}

// summaryColumn is where the usage text's summaries start; a command line
// too long to leave two spaces before it has its summary on the next line.
const summaryColumn = 40

// usage is the text --help prints, a line per command.
func usage(ext extension.Set) string {
	var b strings.Builder
	b.WriteString("idemgate — an HTTP gateway that makes retries safe\n\nUsage:\n")
	for _, c := range commands(ext) {
		// Names shorter than eight characters are padded to line the
		// arguments up.
		line := fmt.Sprintf("  idemgate %-7s %s", c.name, c.args)
		switch {
		case c.summary == "":
		case len(line)+2 <= summaryColumn:
			line = fmt.Sprintf("%-*s%s", summaryColumn, line, c.summary)
		default:
			line += "\n" + strings.Repeat(" ", summaryColumn) + c.summary
		}
		b.WriteString(line + "\n")
	}
	b.WriteString("\nEvery command takes --help. Exit codes: 0 ok, 1 failure, 2 usage or config error.\n")
	return b.String()
}

// Run is the whole program, with what ext adds: idemgate.Main only wires
// the process to it.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ext extension.Set) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage(ext))
		return usagef("no command given")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage(ext))
		return nil
	}
	for _, c := range commands(ext) {
		if c.name == name {
			return c.run(ctx, ext, rest, getenv, stdout, stderr)
		}
	}
	fmt.Fprint(stderr, usage(ext))
	return usagef("unknown command %q", name)
}
