// Package workerstest runs one business function in a test with everything
// the worker framework gives it in production, as River's rivertest.Worker
// does for River workers: the payload goes through workers.Handle's
// algorithm (execution state, the resource lock, a fencing token drawn from
// the durable counter), and the test gets back what happened.
//
//	w := workerstest.NewWorker(t, "invoice.create", invoiceKey, orderResource, createInvoice(pool),
//		workerstest.DB(pool))
//	res := w.Work(t, InvoiceCreate{OrderID: "o-1", AmountCents: 500})
//	// res.Status == job.StatusSucceeded, res.ResultRef is the invoice,
//	// res.Job.Token the fencing token it was written under.
//
// Three ways of running a payload prove the three things a business
// function must get right:
//
//   - Work again: a job that has succeeded is replayed (Replayed, the
//     stored ResultRef) and the function does not run;
//   - WorkUnrecorded, then Work: the worker dies after the effect, before
//     recording it, so the next delivery runs the function again under a
//     higher token; its effect must not happen twice;
//   - WorkStale: a newer owner writes on the job's resource while the
//     function runs; its fenced write must be refused (Class
//     workers.ClassStaleToken).
//
// The framework's state lives in PostgreSQL with idemgate's migrations
// applied (`idemgate migrate up`), the locks in Redis. NewWorker takes the
// database and the Redis client a test passes, or opens TEST_DATABASE_URL
// and TEST_REDIS_URL, and skips the test when the variable it needs is
// unset. Each Worker submits its jobs as a tenant of its own (a random
// name unless Tenant says otherwise), so tests that share a database, and
// runs of the same test, never see each other's jobs.
package workerstest
