// Package execution keeps the execution state of idempotent jobs in
// PostgreSQL: one `job_executions` row per (tenant, business key) — the key
// is `invoice:{order_id}`, never an attempt id — saying whether the job is
// processing, succeeded or failed, how many real attempts it has had, the
// fencing token of the attempt that owns it now, and the hash of the
// payload that took the key.
//
// Take draws the resource's next fencing token (fence.NextStatement) and
// marks the job processing under it in one statement, so the token and the
// ownership commit together; MarkProcessing does the same with a token
// drawn elsewhere. Every change after that is conditional on the token, so
// an attempt that has lost the job to a newer one can neither finish nor
// fail it: its writes come back as a *fence.StaleTokenError. A succeeded
// row is final: Take refuses it with ErrSucceeded and the worker acks the
// duplicate delivery instead of running it again. A key that has
// succeeded, or is running, with another payload refuses the attempt with
// ErrConflict. The attempt count means real attempts: MarkUnavailable
// records an attempt that found a dependency unavailable and gives it back
// in the same statement.
//
// The attempt ledger (job_attempts, ledger.go) keeps the history the row
// does not: Take inserts one row per attempt with its token, in its own
// statement, and marks the key's unfinished earlier attempts crashed; each
// Mark* statement ends the attempt's row with its Outcome. EndAttempt
// records an attempt that lost the job, RecordBusy a delivery that found
// the resource locked, Attempts reads the ledger and DeleteEndedAttempts
// is its janitor.
//
// On a pool, WithBatching lets the Takes and MarkSucceededs of concurrent
// jobs share one round trip and one commit (batch.go); each caller is
// answered only after the commit that carries its statement.
//
//	store := execution.New(pool, execution.WithBatching(execution.DefaultBatchLanes, execution.DefaultBatchMax))
//	rec, err := store.Take(ctx, execution.Attempt{
//		Tenant: "acme", Key: "invoice:42", Task: "invoice.create",
//		Resource: "acme/order:42", PayloadSHA256: sha,
//	})
//	switch {
//	case errors.Is(err, execution.ErrSucceeded):
//		return nil // done before: ack
//	case err != nil:
//		return err
//	}
//	// ... the side effect, fenced with rec.FencingToken, then:
//	err = store.MarkSucceeded(ctx, rec.Tenant, rec.Key, rec.FencingToken, "invoice-7")
package execution
