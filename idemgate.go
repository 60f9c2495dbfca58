package idemgate

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/internal/cli"
)

// Main runs the command the process's arguments name, with what opts add,
// and exits with its exit code: 0 ok, 1 failure, 2 a usage or
// configuration error. SIGINT and SIGTERM end a running command gracefully.
func Main(opts ...extension.Option) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, opts...)
	stop()
	os.Exit(ExitCode(err, os.Stderr))
}

// Run runs the command args name (args[0] is the command, "serve", not
// the program) until it ends or ctx does, reading the environment through
// getenv, with what opts add. It is Main without the process: for tests
// and for programs that own their signals.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, opts ...extension.Option) error {
	return cli.Run(ctx, args, getenv, stdout, stderr, extension.Apply(opts...))
}

// ExitCode is the exit code of a command that ended with err, as Main
// exits: 0 for nil and for --help, 2 for a usage or configuration error,
// else 1. An error the command has not logged already is printed on
// stderr first.
func ExitCode(err error, stderr io.Writer) int { return cli.ExitCode(err, stderr) }
