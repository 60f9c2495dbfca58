// Package execution keeps the execution state of idempotent jobs in
// PostgreSQL: one `job_executions` row per business key (`invoice:{order_id}`,
// never an attempt id) saying whether the job is processing, succeeded or
// failed, how many real attempts it has had, and the fencing token of the
// attempt that owns it now.
//
// Every change after the first is conditional on that fencing token, so an
// attempt that has lost the job to a newer one can neither finish nor fail
// it: its writes come back as a *fence.StaleTokenError. A succeeded row is
// final; MarkProcessing refuses it with ErrSucceeded and the worker acks the
// duplicate delivery instead of running it again.
//
//	store := execution.New(pool)
//	rec, err := store.MarkProcessing(ctx, execution.Attempt{
//		Key: "invoice:42", Task: "invoice.create", Resource: "order:42", Token: token,
//	})
//	switch {
//	case errors.Is(err, execution.ErrSucceeded):
//		return nil // done before: ack
//	case err != nil:
//		return err
//	}
//	// ... the side effect, then:
//	err = store.MarkSucceeded(ctx, rec.Key, rec.FencingToken, "invoice-7")
package execution
