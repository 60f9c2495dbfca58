// Package enqueue turns an accepted request into a queued job. Each job
// has a record in PostgreSQL (the jobs table: the public job document and
// the source of truth for a failed job) and an asynq task whose TaskID is
// the job id, derived from the request's idempotency scope (tenant, route,
// key). The record is written before the task is enqueued, and both steps
// are idempotent, so a gateway that crashes between them, or between them
// and storing its response, leaves at most one task: the retry finds the
// record, enqueues again, and asynq refuses a second task with the same id.
// The task carries the job id and the tenant in its headers; the payload is
// the request body as sent, validated first against the job's schema.
//
// After that the record follows the worker: Jobs.SetStatus is what the
// worker's status reports (workers.Deps.OnStatus) call, and a succeeded job
// never moves back. DeadLetters lists, replays and deletes failed jobs for
// `idemgate dlq`, from the jobs table, because asynq's archive is bounded.
// The package does not know how a task is run.
//
// The record, not the task, is the truth: a job is accepted once its
// record is committed, even if its enqueue then fails (ErrTaskDeferred),
// and the queue may lose tasks (a Redis restart without persistence). The
// Relay finds the unfinished jobs whose tasks are missing and enqueues
// them again with the same TaskID.
//
//	e := enqueue.New(pool, asynqClient)
//	spec, _ := cfg.Job("invoice.create") // a declared job (package job)
//	job, err := e.Submit(ctx, enqueue.Request{Tenant: "acme", Route: "invoices",
//		Key: "order-42", Spec: spec, Body: body})
//
//	relay := enqueue.NewRelay(e, inspector, enqueue.RelayOptions{})
//	go relay.Run(ctx) // owned: wait for it after ctx ends
package enqueue
