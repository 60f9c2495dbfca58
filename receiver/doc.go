// Package receiver is what a service uses to receive the jobs idemgate
// delivers over HTTP. idemgate delivers at least once: a retry after a
// timeout, a worker that lost its lock, or an operator's replay can all send
// the same job again, and an older attempt can arrive after a newer one.
// The receiver makes the effect happen once and refuses the stale attempt.
//
// Three steps, each usable alone:
//
//   - Verifier checks the Standard Webhooks signature (webhook-id,
//     webhook-timestamp, webhook-signature) against one or more "whsec_"
//     secrets, so a secret can rotate without downtime.
//   - Read bounds, verifies and parses the body into a Delivery and checks
//     that the Idempotency-Key, Idemgate-Tenant and
//     Idempotency-Fencing-Token headers agree with it.
//   - Apply runs the business write inside the service's own PostgreSQL
//     transaction, fenced per (tenant, resource) and at most once per
//     (tenant, Idempotency-Key). The bookkeeping lives in two tables of
//     the service's database (Schema), so it commits or rolls back with
//     the write it guards; a separate store could not give that.
//
// Handler puts the three together and answers with the status codes the
// sender understands: 200 with the result_ref (also for a repeat), 401 for a
// bad signature, 400 for a bad envelope, 409 with Idemgate-Stale: true for a
// superseded attempt, 422 for a refusal the business function marks with
// Reject, 500 otherwise.
//
//	v, err := receiver.NewVerifier(os.Getenv("SHIP_WEBHOOK_SECRET"))
//	...
//	if err := receiver.EnsureSchema(ctx, pool); err != nil { ... }
//	mux.Handle("POST /hooks/shipments", receiver.Handler(v, pool,
//		func(d receiver.Delivery) string { return "order:" + orderID(d) },
//		func(ctx context.Context, tx pgx.Tx, d receiver.Delivery) (string, error) {
//			// the business write, in tx; its id is the result_ref
//		}))
//
// The package depends on the standard library and pgx only, so a service
// imports it without importing idemgate.
package receiver
