// Package pgstore keeps idempotency records in PostgreSQL, the gateway's
// source of truth: one row per (tenant, route, key) in the
// idempotency_records table of package migrations. Every decision is a single
// statement the database serialises, and every time that matters (leases,
// retention) is the database's now(), so gateway clocks need not agree. A
// claim is one INSERT … ON CONFLICT … DO UPDATE that takes over a record only
// when its retention passed, or, for the same fingerprint, when it was
// released or its lease expired. Complete, Renew, Release and MarkUnknown
// change the row only for the claim's owner, and the ones that end a claim
// NOTIFY, in the same statement, the gateway instances watching the record.
// Expired rows stay until DeleteExpired (or RunJanitor) removes them in
// bounded batches.
//
// The claims and completions of concurrent requests are coalesced into one
// round trip run as one transaction, so one commit serves them all
// (batch.go; WithBatching tunes or turns it off). A result is handed back
// only after the commit that holds it, and when a batch fails each of its
// statements runs again on its own. Every call returns its context's error
// once the context ends, batched or not; a statement whose caller gave up
// before its batch was sent is never sent. A batch runs on the goroutine
// of one of its callers, so batching starts no goroutine, and a batch
// stuck on a network that stopped answering ends when its leader gives up,
// or at the batch timeout (WithBatchTimeout). A write whose context ended after
// it was sent may have committed (a commit waiting for a synchronous
// standby has, locally): the Store ends the backend that ran it and reads
// the row back, so the caller learns what happened instead of a guess
// (ambiguous.go, WithResolveTimeout).
//
// Fencing tokens are the record's previous token plus one or the
// database clock in microseconds, whichever is higher, so a failover that
// loses a record's last writes cannot hand its token out again.
//
// Through a transaction pooler (PgBouncer with pool_mode = transaction)
// the pool must prepare nothing under a name (pgx's
// default_query_exec_mode=exec), the listener behind Watch needs a
// direct connection of its own (WithListenConfig), since a LISTEN holds a
// session, and ambiguous writes cannot be settled (WithResolveTimeout(0)). A Store whose listener finds that notifications cannot reach
// it says so once, and duplicates waiting for a request in flight then
// find its end by polling.
//
//	store := pgstore.New(pool) // a *pgxpool.Pool on a migrated database
//	defer store.Close()        // stops the LISTEN connection Watch opened
//
//	ctx, cancel := context.WithCancel(ctx)
//	var wg sync.WaitGroup
//	wg.Go(func() { _ = store.RunJanitor(ctx, time.Minute, 1000) })
//	defer wg.Wait() // after cancel: defers run last first
//	defer cancel()
//
//	res, err := store.Claim(ctx, idempotency.ClaimRequest{
//		Scope: scope, Fingerprint: fp, Owner: owner,
//		Lease: 30 * time.Second, Retention: 24 * time.Hour,
//	})
package pgstore
