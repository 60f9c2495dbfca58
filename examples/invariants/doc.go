// Package invariants checks, after the fact, that the effects of the example
// jobs (package examples) happened exactly once: they are the example jobs'
// checks of `idemgate-examples reconcile`, run by package reconcile. The
// worker's guarantees come from constraints, fences and execution state;
// the checks do not trust them and reads the tables themselves, in one consistent snapshot,
// reporting every violation with the ids involved. Every check works
// within a tenant — an order, a SKU, a payment and a job key are a
// tenant's — and names a tenant's entity by its scoped name, as
// workers.Scope writes it ("acme/o-1"; the bare id for the empty tenant):
//
//   - invoices: one invoice per order;
//   - stock: for every SKU, stock = initial_stock + the sum of its ledger
//     deltas, and no ledger row for an unknown SKU;
//   - payments: every succeeded payment holds a partner charge id, no two
//     payments hold the same one;
//   - jobs: every succeeded job (jobs.status) has a succeeded execution
//     (job_executions, by tenant and business key), every succeeded execution has its
//     effect row (invoice, ledger row, succeeded payment, notification) and
//     records that effect's id as its result, and no effect row lacks a
//     succeeded execution;
//   - stuck jobs, when Options.StuckAfter is set: idemgate's own check
//     (reconcile.StuckJobs), run among these;
//   - partner, when Options gives the partner's own account: every effect
//     the partner applied was applied once and is recorded by exactly one
//     succeeded payment or notification, and every recorded one was applied.
//
// Several of these are structural today (unique (tenant, order_id), unique
// partner_charge_id, a foreign key from the ledger): reconcile checks them
// anyway, because a dropped constraint, a restored backup or a hand-made
// fix can break what the schema no longer enforces. The partner check is
// the one that sees a double charge the database cannot: a charge the
// partner applied under a second Idempotency-Key, which no row of ours
// records.
//
//	rep, err := invariants.Run(ctx, pool, os.Stdout, invariants.Options{})
//	if err != nil {
//		return err // the checks could not run
//	}
//	if !rep.Clean() {
//		os.Exit(1) // every violation is printed and in rep.Violations
//	}
//
// Run on a quiet system, or set Options.Grace: a job that is running has
// written its effect a moment before it records its success, and a charge
// the partner has applied is recorded only when its answer arrives.
package invariants
