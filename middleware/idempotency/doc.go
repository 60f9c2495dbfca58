// Package idempotency is net/http middleware that makes retries of unsafe
// requests safe. A request must carry an Idempotency-Key; the first request
// with a key claims a record in a Store under a lease and runs, and its
// response is stored and replayed, byte for byte, to every retry. A retry
// while the first is running gets 409 (or waits, with WaitInFlight); the
// same key with a different request gets 422. Responses that mean "not
// processed" (408, 425, 429, 502, 503, 504) release the key so a retry runs
// again; a crashed attempt's lease expires and the next retry takes over
// with a higher fencing token, which the handler reads from AttemptFrom and
// can forward upstream.
//
// The wrapped handler reads its claim with AttemptFrom and, when it proxies,
// marks a transport failure NotProcessed (the key is released) or Ambiguous
// (OnAmbiguous decides). Errors are sentinels carried by a *problem.Error,
// the public detail apart from the logged cause; an ErrorHandler renders
// them. A problem.Writer writes problem+json from a problem.Table (the
// middleware's Refusals and an application's own rows), with ProblemKey
// naming the key of the claim. DefaultErrorHandler is such a writer.
//
// The store decides correctness: pgstore (PostgreSQL) is the source of
// truth, redisstore is faster and as durable as Redis, memstore is for tests
// and single processes. Every store passes the idempotencytest suite. The
// stores import this package, never the reverse, and this package needs
// only the standard library, ijson and problem (both standard library
// only), so a service adopts it without the gateway.
//
//	mw, err := idempotency.New(pgstore.New(pool), idempotency.Config{
//		Route:  "payments",
//		Tenant: func(r *http.Request) string { return tenantOf(r) },
//	})
//	if err != nil { … }
//	http.Handle("/v1/payments", mw.Wrap(paymentsHandler))
package idempotency
