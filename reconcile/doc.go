// Package reconcile checks, after the fact, what the tables say happened:
// it reads them in one read-only, repeatable-read snapshot, runs each
// Check over it, and reports every violation with the ids involved and,
// for a violation about a job, that job's attempts from the attempt
// ledger (which worker ran it, with which fencing token, and how each
// attempt ended). It trusts neither the queue nor the worker: constraints,
// fences and execution state are what make an effect happen once, and
// reconcile is how an operator sees that they did.
//
// idemgate's own check is StuckJobs: no job stays unfinished (queued,
// processing, retrying, cancelling) with its record unchanged for longer than
// Options.StuckAfter, each reported with where the queue holds its task,
// if it does — a job whose task the queue lost never runs. A job's
// attempts say how a cancel ended it: the ledger's cancelled rows name the
// case (cancelled before this delivery, cancelled in flight, its effect
// fenced out, or no answer: the receiver may have applied it). A program adds
// the checks of its own tables (extension.WithReconcile); the example
// jobs' are in examples/invariants.
//
//	rep, err := reconcile.Run(ctx, pool, os.Stdout, reconcile.Options{StuckAfter: 15 * time.Minute},
//		reconcile.StuckJobs())
//	if err != nil {
//		return err // a check could not run
//	}
//	if !rep.Clean() {
//		os.Exit(1) // every violation is printed and in rep.Violations
//	}
package reconcile
