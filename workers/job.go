package workers

// A job as its business function sees it, and the function's type. A
// function that writes its effect into the framework's PostgreSQL can
// record its success in the same transaction (Job.CompleteTx).

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
)

// Job is one delivery of a task to a business function.
type Job[T any] struct {
	// Key is the job's business identity (`invoice:{order_id}`).
	Key string
	// Tenant is the tenant that submitted the job ("" for a task enqueued without one). Business keys and resources are scoped to it.
	Tenant string
	// Resource is the entity the job is serialised on, scoped to its
	// tenant (`acme/order:{order_id}`; unscoped for a task without a
	// tenant): the name of its lock and of its fence. Pass it to
	// fence.Check, or use CheckFence.
	Resource string
	// Payload is the task's decoded JSON payload.
	Payload T
	// Token is this attempt's fencing token. Every business write passes it
	// to fence.Check, or compares it in its own WHERE clause, in the
	// transaction that writes.
	Token int64
	// Attempt counts real attempts, from 1. An attempt that ended with
	// Unavailable is given back, so the next one has the same number.
	Attempt int
	// Task is the asynq task.
	Task *asynq.Task

	// completion is set by CompleteTx; nil outside an attempt.
	completion *completion
}

// completion is what CompleteTx recorded of an attempt.
type completion struct {
	done bool
	ref  string
}

// CompleteTx records this attempt's success in tx, the transaction that
// does the job's business writes, so that the effect and the record of
// its success commit together or not at all (River's JobCompleteTx): a
// worker killed before the commit leaves neither, and the retry runs the
// effect as if for the first time. It writes what the framework writes
// after a success (the execution state, the attempt's ledger row, the job
// document) and needs the framework's tables in the same database as
// tx. Call it in the transaction, commit, and return resultRef with a
// nil error: the framework then records nothing more.
//
// It is fenced by itself: it returns a *fence.StaleTokenError when a newer
// attempt owns the job (roll tx back and return the error), and from the
// call until tx ends it holds the job's execution row, so a newer
// attempt waits for the commit and then finds the job succeeded.
// Returning nil after rolling tx back leaves the job processing with its
// attempt open: the relay's takeover hands it out again once the lock is
// gone. On a Job the framework did not make (a test calling the business
// function directly) it does nothing.
func (j Job[T]) CompleteTx(ctx context.Context, tx pgx.Tx, resultRef string) error {
	if j.completion == nil {
		return nil // a Job made by hand, as a unit test of fn does: nothing to complete
	}
	if err := execution.CompleteTx(ctx, tx, j.Tenant, j.Key, j.Token, resultRef); err != nil {
		return fmt.Errorf("workers: complete %s: %w", j.Key, err)
	}
	*j.completion = completion{done: true, ref: resultRef}
	return nil
}

// CheckFence is fence.Check for this attempt: call it in the transaction
// that does the job's business writes, before them.
func (j Job[T]) CheckFence(ctx context.Context, tx fence.Querier) error {
	return fence.Check(ctx, tx, j.Resource, j.Token)
}

// Func is a business function. It does the job's effect under ctx, which is
// cancelled as soon as the job's lock is lost, and returns a reference to
// the result (an invoice id). Its error is transient unless wrapped with
// Permanent (the job fails) or Unavailable (a dependency is down: retried,
// the attempt not counted); a *fence.StaleTokenError means a newer owner
// took the job.
//
// A job can run again after its effect happened (a crash before it was
// recorded), so the effect must itself be idempotent per Key: a unique
// constraint, an `ON CONFLICT DO NOTHING` ledger row, a key forwarded to a
// partner that honours it.
type Func[T any] func(ctx context.Context, job Job[T]) (resultRef string, err error)
