// Command idemchaos runs idemgate's fault suite (package internal/chaos)
// against private Redis and PostgreSQL servers and prints one table: what
// each fault did to retried requests and accepted jobs. It exits 1 when a
// guarantee is broken or a scenario could not run, 2 on a usage error.
//
//	idemchaos [-scenario a,b] [-keys N] [-short] [-json] [-idemgate bin/idemgate-examples] [-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/idemgate/idemgate/internal/e2e/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var usage usageError
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "idemchaos:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "idemchaos:", err)
		os.Exit(1)
	}
}

// usageError is a mistake on the command line.
type usageError struct{ error }

// errBroken is the run's error when a guarantee is broken.
var errBroken = errors.New("a guarantee is broken")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("idemchaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		scenarios = fs.String("scenario", "", "comma list of scenarios to run (default all: "+strings.Join(chaos.Names(), ", ")+")")
		keys      = fs.Int("keys", 0, "keys per scenario (default 300, 100 with -short)")
		short     = fs.Bool("short", false, "fewer keys and shorter client deadlines")
		asJSON    = fs.Bool("json", false, "print the table as JSON")
		bin       = fs.String("idemgate", "bin/idemgate-examples", "the idemgate binary to run: one with the example jobs (make build)")
		dir       = fs.String("dir", "", "keep the servers' data, configurations and logs in `DIR` (default a temporary directory, removed)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	var names []string
	for n := range strings.SplitSeq(*scenarios, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(chaos.Names(), n) {
			return usageError{fmt.Errorf("unknown scenario %q (one of %s)", n, strings.Join(chaos.Names(), ", "))}
		}
		names = append(names, n)
	}
	rep, err := chaos.Run(ctx, chaos.Options{
		Idemgate: *bin, Scenarios: names, Keys: *keys, Short: *short, Dir: *dir, Progress: stderr,
	})
	if rep == nil {
		return err
	}
	if *asJSON {
		if werr := rep.WriteJSON(stdout); werr != nil {
			return werr
		}
	} else if werr := rep.WriteTable(stdout); werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if rep.Failed() {
		return errBroken
	}
	return nil
}
