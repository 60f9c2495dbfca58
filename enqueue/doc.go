// Package enqueue turns an accepted request into a queued job. Each job
// has a record in PostgreSQL (the jobs table: the public job document and
// the source of truth for a failed job) and an asynq task whose TaskID is
// the job id, derived from the request's idempotency scope (tenant, route,
// key). The record is written before the task is enqueued, and both steps
// are idempotent, so a gateway that crashes between them, or between them
// and storing its response, leaves at most one task: the retry finds the
// record, enqueues again, and asynq refuses a second task with the same id.
//
//	e := enqueue.New(pool, asynqClient)
//	spec, _ := cfg.Job("invoice.create") // a declared job (package job)
//	job, err := e.Submit(ctx, enqueue.Request{Tenant: "acme", Route: "invoices",
//		Key: "order-42", Spec: spec, Body: body})
package enqueue
