// Command idembench measures idemgate next to a plain
// httputil.ReverseProxy on the same machine, in the same run. It starts a
// fast upstream, the baseline proxy and `idemgate serve` with each store,
// pins each server to one CPU and the load generator (vegeta, as a
// library, at a fixed concurrency) to another, alternates baseline and
// idemgate runs, and reports req/s, p50 and p99 and the ratio of each
// idemgate run to the baseline run just before it. It also compares raw
// asynq with the idempotent worker wrapper, that wrapper with River
// (idembench run -scenarios river), and soaks the gateway at a fixed rate
// watching its memory and goroutines.
//
//	idembench run -quick                 # the ~2-minute run (make bench-quick)
//	idembench run -profile               # every scenario, with pprof profiles (make bench)
//	idembench soak -duration 10m         # make soak
//
// Load goes only to loopback addresses; every run is bounded in time and in
// requests and stops by itself. See BENCHMARKS.md.
package main

import (
	"context"
	"errors"
	"flag"
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
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "idembench:", err)
		os.Exit(1)
	}
}

const usage = `idembench — idemgate next to a plain reverse proxy, in the same run

Usage:
  idembench run  [flags]   the scenarios (idembench run -h lists the flags)
  idembench soak [flags]   a fixed-rate run watching idemgate's RSS and goroutines
  idembench scale [flags]  claims, replays, 409s and the janitor as the stores fill to millions of records
                           (-stores jobs: the job tables' rows and sizes under the retention janitor)
  idembench capacity [flags]  requests held in flight up to 10,000: RSS, goroutines, probe latency, shedding
  idembench batch [flags]  jobs accepted per second: one 500-item batch against 500 single submits
  idembench proxy  -listen ADDR -upstream URL   the baseline proxy (started by run)
  idembench worker -mode raw|wrapped|effect|river ...   one worker run (started by run)
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "run":
		return runBench(ctx, args[1:], getenv, stdout, stderr)
	case "soak":
		return runSoak(ctx, args[1:], getenv, stdout, stderr)
	case "scale":
		return runScale(ctx, args[1:], getenv, stdout, stderr)
	case "capacity":
		return runCapacity(ctx, args[1:], getenv, stdout, stderr)
	case "batch":
		return runBatchBench(ctx, args[1:], getenv, stdout, stderr)
	case "proxy":
		return runProxy(ctx, args[1:], stdout)
	case "worker":
		return runWorkerChild(ctx, args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
