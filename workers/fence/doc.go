// Package fence issues fencing tokens and refuses writes that carry a stale
// one. A lock keeps two workers apart only while both keep to their TTLs; a
// worker that pauses past its lease wakes up believing it still owns the
// resource. Fencing closes that gap: every time a worker takes a resource it
// draws the next token from a strictly increasing counter, and the data
// refuses a write whose token is older than one it has already accepted.
//
// The counter is a row per resource in PostgreSQL (`fencing_tokens`), bumped
// by one `INSERT … ON CONFLICT DO UPDATE … RETURNING` to the previous token
// plus one or the database clock in microseconds, whichever is higher. It
// is durable: a Redis restart or FLUSHALL loses the locks, never the
// counter; and a failover that loses the counter's last writes cannot make
// it repeat a token, since the clock has moved on since they were drawn. A
// new owner always gets a higher token than every owner before it. Tokens
// are about 1.8e15 (below 2^53, exact in a JavaScript number): store them
// as 64-bit integers.
//
//	token, err := fence.Next(ctx, pool, "sku:9")
//
// The worker framework draws its tokens inside execution.Store.Take
// instead: NextStatement is part of the statement that marks the job
// processing, so the token and the job's ownership commit together.
//
// A business write checks the fence in its own transaction. Check locks the
// resource's row in `fence_accepted` for the rest of the transaction and
// records the token, or returns a *StaleTokenError (errors.Is(err,
// ErrStaleToken)) when a newer token has already written:
//
//	tx, err := pool.Begin(ctx)
//	...
//	defer tx.Rollback(ctx)
//	if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
//		return err // a newer owner has written: stop, write nothing
//	}
//	// ... the business writes, then tx.Commit(ctx)
//
// A table can also carry the token itself, so the guard is the write's own
// WHERE clause and a stale owner's UPDATE touches no row. Expect turns "no
// row" into the same stale-token error:
//
//	tag, err := tx.Exec(ctx, `
//		UPDATE inventory_items
//		   SET stock = stock + $1, fencing_token = $2
//		 WHERE tenant = $3 AND sku = $4 AND fencing_token < $2`, delta, job.Token, job.Tenant, sku)
//	if err != nil {
//		return err
//	}
//	if err := fence.Expect(tag, job.Resource, job.Token); err != nil {
//		return err
//	}
//
// With `fencing_token < $token` a token changes a row at most once, so an
// owner that updates the same row twice, or a retry that runs the same
// write again under a new token, must be made idempotent another way: insert
// a ledger row keyed by the job (`ON CONFLICT DO NOTHING`) in the same
// transaction and skip the update when it already exists.
package fence
