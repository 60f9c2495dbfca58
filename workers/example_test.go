package workers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/fence"
)

// InvoiceCreate is the payload of the invoice.create task.
type InvoiceCreate struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// createInvoice is a business function: its write is fenced, and it is
// idempotent per order (the unique order_id), so a run after a crash
// returns the invoice the first run created.
func createInvoice(pool *pgxpool.Pool) workers.Func[InvoiceCreate] {
	return func(ctx context.Context, job workers.Job[InvoiceCreate]) (string, error) {
		if job.Payload.AmountCents <= 0 {
			return "", workers.Permanent(errors.New("amount must be positive"))
		}
		var id string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `
WITH created AS (
    INSERT INTO invoices (order_id, amount_cents, currency, job_key, fencing_token)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (order_id) DO NOTHING
    RETURNING id
)
SELECT id FROM created UNION ALL SELECT id FROM invoices WHERE order_id = $1
LIMIT 1`, job.Payload.OrderID, job.Payload.AmountCents, job.Payload.Currency, job.Key, job.Token).Scan(&id)
		})
		return id, err
	}
}

// Wrapping a business function and running workers for it. It needs
// PostgreSQL and Redis, so it is compiled but not run.
func ExampleHandle() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	asynqOpt, err := asynq.ParseRedisURI(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	lockOpt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	lockRedis := redis.NewClient(lockOpt) // the locks' own client, not asynq's
	defer lockRedis.Close()

	cfg := workers.Config{LockTTL: 30 * time.Second, MaxAttempts: 10}
	deps := cfg.Deps(pool, lockRedis)
	deps.Logger = slog.Default()

	mux := asynq.NewServeMux()
	mux.Handle("invoice.create", workers.Handle(deps, "invoice.create",
		func(p InvoiceCreate) string { return "invoice:" + p.OrderID },
		func(p InvoiceCreate) string { return "order:" + p.OrderID },
		createInvoice(pool)))

	srv, err := workers.NewServer(asynqOpt, cfg, mux, workers.WithLogger(slog.Default()))
	if err != nil {
		panic(err)
	}
	if err := srv.Run(ctx); err != nil {
		panic(err)
	}
}

// A business function's errors decide what happens to the task.
func ExamplePermanent() {
	outcomes := []struct {
		name string
		err  error
	}{
		{"receiver 500", errors.New("receiver answered 500")},
		{"partner down", workers.Unavailable(errors.New("partner answered 503"))},
		{"declined", workers.Permanent(errors.New("card declined"))},
		{"lock busy", &workers.LockBusyError{Task: "payment.charge", Key: "payment:7", Resource: "payment:7"}},
		{"lost ownership", &workers.OwnershipLostError{Task: "payment.charge", Key: "payment:7", Resource: "payment:7", Token: 3, Err: fence.Stale("payment:7", 3, 4)}},
	}
	// A failure is retried with a growing backoff; an unavailable one does
	// not count toward MaxAttempts.
	for _, o := range outcomes {
		fmt.Printf("%-14s permanent=%-5v unavailable=%-5v failure=%v\n", o.name,
			workers.IsPermanent(o.err), workers.IsUnavailable(o.err), workers.IsFailure(o.err))
	}
	// Output:
	// receiver 500   permanent=false unavailable=false failure=true
	// partner down   permanent=false unavailable=true  failure=true
	// declined       permanent=true  unavailable=false failure=true
	// lock busy      permanent=false unavailable=false failure=false
	// lost ownership permanent=false unavailable=false failure=false
}

// Retry delays: exponential with full jitter for failures, short for a busy
// lock. Here the random draw is pinned to the top of each range.
func ExampleBackoff_RetryDelay() {
	b := workers.Backoff{
		Base: time.Second,
		Max:  time.Minute,
		Busy: 2 * time.Second,
		Rand: func(n int64) int64 { return n - 1 },
	}
	failure := errors.New("partner timed out")
	for n := range 8 {
		fmt.Println(n, b.RetryDelay(n, failure, nil).Round(time.Second))
	}
	fmt.Println("busy", b.RetryDelay(5, &workers.LockBusyError{}, nil).Round(time.Second))
	// Output:
	// 0 1s
	// 1 2s
	// 2 4s
	// 3 8s
	// 4 16s
	// 5 32s
	// 6 1m0s
	// 7 1m0s
	// busy 3s
}

// Shipment is the payload of a job a program declares itself.
type Shipment struct {
	OrderID  string `json:"order_id"`
	Quantity int    `json:"quantity"`
}

// A program's own job: declared in the configuration (schema, business
// key and resource templates), run by a Go function registered by its task
// name. Mux refuses a declared job that nothing can run.
func ExampleHandlers() {
	cfg, err := config.Parse([]byte(`
database_url: postgres://127.0.0.1:5432/app
redis_url: redis://127.0.0.1:6379/0
admin_listen: ""
auth: {mode: none}
jobs:
  - task: shipment.book
    schema:
      type: object
      required: [order_id, quantity]
      properties:
        order_id: {type: string, minLength: 1}
        quantity: {type: integer, minimum: 1}
    business_key: "shipment:{order_id}"
    resource: "order:{order_id}"
routes:
  - {name: shipments, methods: [POST], path: /v1/shipments, enqueue: {task: shipment.book}}
`), "idemgate.yaml", func(string) string { return "" }, config.WithHandlers("shipment.book"))
	if err != nil {
		fmt.Println(err)
		return
	}

	hs := workers.NewHandlers()
	workers.Add(hs, "shipment.book", func(ctx context.Context, job workers.Job[Shipment]) (string, error) {
		// job.Key is "shipment:<order_id>", job.Tenant the submitting
		// tenant; write under job.CheckFence(ctx, tx) in one transaction.
		return "shp_" + job.Payload.OrderID, nil
	})

	// Neither connects before the first job.
	pool, err := pgxpool.New(context.Background(), cfg.DatabaseURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	deps := workers.Config{}.Deps(pool, rdb)

	if _, err := hs.Mux(deps, cfg.Jobs(), workers.HTTPDelivery{}); err == nil {
		fmt.Println("runs", hs.Tasks())
	}
	_, err = workers.NewHandlers().Mux(deps, cfg.Jobs(), workers.HTTPDelivery{})
	fmt.Println(err)
	// Output:
	// runs [shipment.book]
	// workers: no worker can run ["shipment.book"]: declare deliver.http or register a Go handler
}
