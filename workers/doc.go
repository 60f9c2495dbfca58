// Package workers is the idempotent worker framework: it turns a business
// function into an asynq.Handler whose effect happens once per business key
// however often the queue delivers the task. Queues deliver at least once,
// so the handler assumes every task may arrive twice, concurrently, or
// after a crash half-way through, and relies on three layers: execution
// state in PostgreSQL (package execution) acks a key that has already
// succeeded; a Redis lock per resource (package lock) keeps two workers off
// the same entity; a fencing token (package fence) makes the data refuse a
// worker that lost its lock without noticing. The lock limits concurrency;
// correctness comes from the state and the fence.
//
// A handler is built from a typed business function and two functions that
// derive the job's key (its business identity, never an attempt id) and its
// resource (the entity to serialise on) from the JSON payload:
//
//	type InvoiceCreate struct {
//		OrderID     string `json:"order_id"`
//		AmountCents int64  `json:"amount_cents"`
//	}
//
//	deps := cfg.Deps(pool, lockRedis) // then set Logger, Observer, OnStatus
//	mux := asynq.NewServeMux()
//	mux.Handle("invoice.create", workers.Handle(deps, "invoice.create",
//		func(p InvoiceCreate) string { return "invoice:" + p.OrderID },
//		func(p InvoiceCreate) string { return "order:" + p.OrderID },
//		func(ctx context.Context, job workers.Job[InvoiceCreate]) (string, error) {
//			return createInvoice(ctx, pool, job) // fence.Check(ctx, tx, job.Resource, job.Token) inside
//		}))
//
//	srv, err := workers.NewServer(asynqRedisOpt, cfg, mux)
//	...
//	err = srv.Run(ctx) // until ctx ends, then a graceful shutdown
//
// The business function returns a result reference, or an error: transient
// by default (retried with exponential backoff and full jitter), permanent
// with Permanent (the job is marked failed and its task archived, asynq's
// dead-letter queue). Attempts are counted in job_executions, not by asynq:
// a busy lock reschedules the task soon and is not an attempt, and after
// Config.MaxAttempts real attempts the handler dead-letters the job itself.
// Tasks are therefore enqueued with asynq.MaxRetry(AsynqMaxRetry), and the
// server uses RetryDelay and IsFailure (NewServer sets both).
//
// asynq's own task lease does not protect the data: when a worker stalls or
// a shutdown times out, asynq hands the task to another worker while the
// first one's goroutine may still be running. The resource lock's lease is
// what stops it: its context is cancelled when a renewal fails, and a
// business write that still gets through carries an old fencing token and is
// refused.
package workers
