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
// A program declares its jobs in configuration (task, JSON schema,
// business_key and resource templates) and registers a Go function for
// each task that is not delivered over HTTP:
//
//	type Shipment struct {
//		OrderID  string `json:"order_id"`
//		Quantity int    `json:"quantity"`
//	}
//
//	hs := workers.NewHandlers()
//	workers.Add(hs, "shipment.book", func(ctx context.Context, job workers.Job[Shipment]) (string, error) {
//		return book(ctx, pool, job) // job.CheckFence(ctx, tx) inside its transaction
//	})
//	deps := wcfg.Deps(pool, lockRedis) // then set Logger, Observer, Jobs
//	mux, err := hs.Mux(deps, cfg.Jobs(), workers.HTTPDelivery{})
//	srv, err := workers.NewServer(asynqRedisOpt, wcfg, mux)
//	err = srv.Run(ctx) // until ctx ends, then a graceful shutdown
//
// Mux wraps every declared job in the algorithm below: a job with
// deliver.http is POSTed to its receiver by Deliver, any other runs its
// registered function, and a declared job with neither is refused at
// start-up. The payload is validated against the job's schema, and its
// business key and resource come from the declared templates (or from the
// payload type's own BusinessKey and Resource methods, see Keyed).
//
// Handlers, Add and Mux are the front door: a job is declared once, in
// configuration, and the producer, the gateway and the worker all read
// that declaration. Handle is the layer underneath, kept public for the
// two users that have no declaration: a program that runs its own asynq
// mux and derives keys in Go (Handle takes key and resource functions
// where Mux reads templates; the algorithm is the same), and a test that
// runs one business function (package workerstest).
//
// Business keys and resources are scoped to the tenant that submitted the
// job (the task's "tenant" header): the same order id from two tenants is
// two jobs, two locks, two fences and two effects. A second job whose key
// already succeeded, or is running, with a different payload fails as a
// *ConflictError instead of reporting the other job's result.
//
// The business function returns a result reference, or an error of one of
// three classes:
//
//   - transient, by default: retried with exponential backoff and full
//     jitter, and counted as an attempt;
//   - unavailable, with Unavailable: a dependency the job needs is down
//     (a partner's 503, a timeout, a refused connection, an open circuit
//     breaker). Retried with the same growing backoff, its error recorded,
//     but the attempt is given back: an outage, however long, delays the
//     job and never dead-letters it;
//   - permanent, with Permanent: the job is marked failed and its task
//     archived (asynq's dead-letter queue).
//
// Attempts are counted in job_executions, not by asynq: a busy lock
// reschedules the task soon and is not an attempt, nor is a delivery a
// flow limit sends back (job.Spec.Limits, WithLimits: taken holding the
// lock, through package limit, with the rate's exact wait), and an
// unavailable dependency is not one either, and after Config.MaxAttempts real attempts
// the handler dead-letters the job itself. Tasks are therefore enqueued
// with asynq.MaxRetry(job.MaxRetry), and the server uses RetryDelay and
// IsFailure (NewServer sets both).
//
//	resp, err := partner.Do(req) // the same Idempotency-Key on every attempt
//	switch {
//	case err != nil:
//		return "", workers.Unavailable(err) // not counted
//	case resp.StatusCode == http.StatusServiceUnavailable:
//		return "", workers.Unavailable(errors.New("partner answered 503"))
//	case resp.StatusCode == http.StatusBadRequest:
//		return "", workers.Permanent(errors.New("partner refused the charge"))
//	}
//
// Deliver judges a receiver's answers the same way: 408, 425, 429, 502,
// 503, 504, a timeout and a connection error are unavailable; a 500, or
// another 5xx, is counted, so a receiver that keeps failing on one job
// dead-letters it.
//
// FinalCallbacks sends a job's final-status callback (job.Spec.OnFinal),
// signed as a delivery is, from the outbox package job keeps; a worker
// process runs it beside its Server, as it runs the relay:
//
//	cb := workers.NewFinalCallbacks(workers.FinalCallbacksConfig{DB: pool, Specs: specs, Document: doc})
//	go cb.Run(ctx) // owned: wait for it after ctx ends
//
// asynq's own task lease does not protect the data: when a worker stalls or
// a shutdown times out, asynq hands the task to another worker while the
// first one's goroutine may still be running. The resource lock's lease is
// what stops it: its context is cancelled when a renewal fails, and a
// business write that still gets through carries an old fencing token and is
// refused. The same lease is why the job need not wait for asynq to hand
// its task on: the relay of any worker sees the lock gone and enqueues a
// takeover task (job.TakeoverTaskID) within about the lock TTL.
//
// An effect that succeeded is recorded, not run again: when MarkSucceeded
// fails, the record is retried in place while the lease holds, for a few
// lock TTLs at most (record.go).
//
// A business function that writes its effect into the same PostgreSQL can
// record its success in the same transaction, with Job.CompleteTx, as
// River's JobCompleteTx does: the effect and the record then commit
// together or not at all, so a worker killed between them leaves neither,
// and a job costs two commits, its start and its effect:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, insertInvoice, job.Tenant, job.Payload.OrderID); err != nil {
//			return err
//		}
//		return job.CompleteTx(ctx, tx, invoiceID)
//	})
package workers
