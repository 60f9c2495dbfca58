// Command partnersim runs the simulated partner API of package partnersim:
// POST /charges, POST /messages (and POST /v1/payments, the example
// upstream of the quickstart), each honouring Idempotency-Key, GET /stats
// and GET /effects (effect id → times applied, for idemgate reconcile).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/examples/partnersim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "partnersim:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("partnersim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9100", "address to listen on")
	latency := fs.Duration("latency", 0, "delay added to every answer")
	failRate := fs.Float64("fail-rate", 0, "chance (0..1) of answering 503 before applying")
	dropRate := fs.Float64("drop-rate", 0, "chance (0..1) of applying and then dropping the connection")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	for name, p := range map[string]float64{"fail-rate": *failRate, "drop-rate": *dropRate} {
		if p < 0 || p > 1 {
			return usageError{fmt.Errorf("--%s %v is outside 0..1", name, p)}
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	sim := partnersim.New(partnersim.Options{Latency: *latency, FailRate: *failRate, DropRate: *dropRate})
	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "partnersim listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	<-errc
	return nil
}
