// Command shipments-receiver serves the demo shipment receiver of package
// shipments: POST /hooks/shipments takes the shipment.book deliveries
// idemgate signs with SHIP_WEBHOOK_SECRET and books each order once, in the
// PostgreSQL database at DATABASE_URL. GET /healthz answers 200 once it is
// serving.
//
//	shipments-receiver [--listen 127.0.0.1:9200] [--database-url URL] [--secret whsec_…]
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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/examples/shipments"
	"github.com/idemgate/idemgate/receiver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "shipments-receiver:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a bad command line: exit status 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shipments-receiver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9200", "address to listen on")
	dbURL := fs.String("database-url", getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	secret := fs.String("secret", getenv("SHIP_WEBHOOK_SECRET"), `webhook secret, "whsec_" + base64 (default $SHIP_WEBHOOK_SECRET)`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	var problems []error
	if *dbURL == "" {
		problems = append(problems, errors.New("no database: set --database-url or DATABASE_URL"))
	}
	if *secret == "" {
		problems = append(problems, errors.New("no webhook secret: set --secret or SHIP_WEBHOOK_SECRET"))
	}
	v, err := receiver.NewVerifier(*secret)
	if *secret != "" && err != nil {
		problems = append(problems, err)
	}
	if err := errors.Join(problems...); err != nil {
		return usageError{err}
	}

	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	if err := shipments.EnsureSchema(ctx, pool); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("POST /hooks/shipments", shipments.New(v, pool))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "shipments-receiver listening on http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// A delivery in flight finishes and commits; one that does not finish
	// in time rolls back, and the sender retries it.
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	<-errc
	return nil
}
