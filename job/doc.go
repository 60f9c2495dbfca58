// Package job owns a job, from its declaration to its last status.
//
// A Spec declares a job: the task a request becomes, the JSON Schema its
// payload must satisfy, and the templates that form its identity. The
// business key ("shipment:{order_id}") is the job's identity, never an
// attempt's: within a tenant, one key is one effect. The resource
// ("order:{order_id}") is the entity the worker locks and fences on.
// Spec.Decode answers the two questions a gateway asks of a body, with the
// errors it maps to statuses: is it JSON at all (ErrMalformed, 400), and is
// it this job's payload (ErrInvalid, 422, with one FieldError per fault).
//
//	spec, err := job.NewSpec("shipment.book", schemaJSON, "shipment:{order_id}", "order:{order_id}")
//	p, err := spec.Decode(body)
//	// p.BusinessKey == "shipment:o-1"
//
// A Submitter turns an accepted request into a job: a Record in
// PostgreSQL (the jobs table: the public job document and the source of
// truth for a failed job) and an asynq task whose TaskID is the job id,
// derived from the request's idempotency scope (ID: tenant, route, key).
// The record is written before the task is enqueued, and both steps are
// idempotent, so a gateway that crashes between them, or between them and
// storing its response, leaves at most one task: the retry finds the
// record, enqueues again, and asynq refuses a second task with the same
// id. The task contract is here too, so that producer and worker agree on
// it: the task carries the job id and the tenant in its headers (HeaderID,
// HeaderTenant), is enqueued with MaxRetry, and its payload is the request
// body as sent, validated first against the job's schema.
//
//	s := job.NewSubmitter(pool, asynqClient)
//	rec, err := s.Submit(ctx, job.Request{Tenant: "acme", Route: "invoices",
//		Key: "order-42", Spec: spec, Body: body})
//
// After that the record follows the worker (workers.Deps.Jobs = records):
// an attempt's start and its success are written into the row by the
// statements that record them in the execution state, every other change
// through Store.Follow, and a succeeded job never moves back. Status is the one definition of where a
// job stands. DeadLetters lists, replays and deletes failed jobs for
// `idemgate dlq`, from the jobs table, because asynq's archive is bounded.
// The package does not know how a task is run, and holds no business
// payloads.
//
// The record, not the task, is the truth: a job is accepted once its
// record is committed, even if its enqueue then fails (ErrTaskDeferred),
// and the queue may lose tasks (a Redis restart without persistence). The
// Relay finds the unfinished jobs whose tasks are missing and enqueues
// them again with the same TaskID. Given the workers' locks
// (RelayOptions.Locks, a *lock.Locker), it also hands over, within about
// the lock TTL, the jobs whose worker lost its lock while asynq still
// holds their task active: their task is enqueued again under
// TakeoverTaskID (docs/design/takeover.md says why that is safe).
//
//	relay := job.NewRelay(s, inspector, job.RelayOptions{Locks: locker, LockTTL: ttl})
//	go relay.Run(ctx) // owned: wait for it after ctx ends
//
// A Watcher wakes the callers waiting on jobs (GET /v1/jobs/{id}?wait=):
// the trigger jobs_notify NOTIFYs Channel with a job's id whenever its
// document changes, one connection per process LISTENs, and one query
// reads every changed job for all its watches, so a thousand callers
// waiting on one job cost one read per change. Without a listener (no
// direct connection, a database restarting) the watched jobs are polled,
// all in one query.
//
//	w := job.NewWatcher(pool, job.WatcherOptions{Connect: connectDirect})
//	go w.Run(ctx) // owned: wait for it after ctx ends
//	x := w.Watch(ctx, id) // before reading the job
//	defer x.Stop()
//	rec, _ := records.Get(ctx, tenant, id)
//	x.Seen(rec)
//	<-x.Changed() // then x.Latest()
//
// A final job is the trigger of two more things, both read from the jobs
// table rather than hooked into each writer (the worker, a cancel, the
// dead-letter queue). Callbacks is the outbox of final-status callbacks:
// Collect makes one event per final status of a job whose Spec declares
// OnFinal (finished_at set and not yet collected), Claim hands due events
// to one sender at a time, Attempted records each attempt; workers'
// FinalCallbacks sends them. Store.DeleteFinished is the jobs
// retention: a job final for longer than it is deleted with its attempt
// ledger and callbacks, and a failed job's archived tasks with it.
//
// A request may schedule its job (Schedule: ScheduleAfter, ScheduleAt, or
// the Spec's Delay; Spec.CheckSchedule bounds it by MaxDelay). The insert
// that records the job computes its not_before, once, on the database's
// clock, and records it StatusScheduled while it is ahead; its task is
// enqueued for that time (asynq.ProcessAt at ProcessAt(not_before)) and
// carries it in HeaderNotBefore, so that a worker handed it early gives
// it back without counting an attempt.
//
// A Spec with a Debounce folds the submits under one debounce key into
// one pending job (debounce.go): one statement postpones it and, in
// trailing mode, replaces its body, or inserts the key's next job. Each
// change sends a task of its own (TaskID, HeaderDebounce), and the
// worker's take refuses one that a later change superseded. In a
// fairness pool (fair.go), each change files its version there instead.
//
// The package depends on the standard library, a JSON Schema compiler,
// asynq, pgx and the idempotency middleware's canonical JSON (itself
// standard library only), so that both sides can import it, and "the same
// payload" means what "the same body" means to the gateway.
package job
