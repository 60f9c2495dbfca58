package invariants

import (
	"context"
	"io"
	"time"

	"github.com/idemgate/idemgate/reconcile"
)

// The checks, as named in Violation.Check and in the output.
const (
	// CheckInvoices: one invoice per order of a tenant.
	CheckInvoices = "invoices"
	// CheckStock: stock = initial_stock + sum(ledger.delta) per SKU.
	CheckStock = "stock"
	// CheckPayments: a succeeded payment holds a charge id no other holds.
	CheckPayments = "payments"
	// CheckJobs: a succeeded job has a succeeded execution.
	CheckJobs = "jobs"
	// CheckJobEffects: a succeeded execution has its effect row.
	CheckJobEffects = "job_effects"
	// CheckEffectJobs: an effect row has a succeeded execution.
	CheckEffectJobs = "effect_jobs"
	// CheckPartner: the partner's applied effects match what is recorded.
	CheckPartner = "partner"
)

// Options adjust a run. The zero value checks the database alone.
type Options struct {
	// Options are the run's own: progress lines, and the
	// stuck-job report (reconcile.StuckJobs) with its StuckAfter and
	// TaskState.
	reconcile.Options
	// Grace leaves effects written less than Grace before the run out of
	// CheckEffectJobs: a job still running writes its effect a moment
	// before it records its success. Default 0, for a quiet system.
	Grace time.Duration
	// PartnerEffects, if set, returns the partner's own account of what it
	// applied: effect id (charge or message) → times applied. With
	// partnersim it is Sim.Applied. It enables CheckPartner.
	PartnerEffects func(ctx context.Context) (map[string]int, error)
	// PartnerApplied, if set and PartnerEffects is not, returns how many
	// effects the partner applied, for a partner that counts but cannot list
	// them (partnersim's GET /stats "applied"): CheckPartner then compares
	// that count with the recorded effects.
	//
	// Both describe a partner that serves only this worker: anything else
	// it applies shows up as unrecorded.
	PartnerApplied func(ctx context.Context) (int64, error)
}

// checks are the example jobs' checks with the options they read.
type checks struct{ opts Options }

// Checks are the example jobs' invariants, in the order they run, with
// idemgate's own stuck-job check among them (before the partner's, which
// asks a source outside the snapshot).
func Checks(opts Options) []reconcile.Check {
	c := checks{opts: opts}
	return []reconcile.Check{
		{Name: CheckInvoices, Run: c.invoices},
		{Name: CheckStock, Run: c.stock},
		{Name: CheckPayments, Run: c.payments},
		{Name: CheckJobs, Run: c.jobs},
		{Name: CheckJobEffects, Run: c.jobEffects},
		{Name: CheckEffectJobs, Run: c.effectJobs},
		reconcile.StuckJobs(),
		{Name: CheckPartner, Run: c.partner},
	}
}

// Run checks every invariant in one read-only, repeatable-read snapshot of
// db (reconcile.Run with Checks), writes each violation as it is found,
// progress lines and a summary to w, and returns the report. Its error
// says a check could not run (the database, the partner source, w);
// violations are not errors.
func Run(ctx context.Context, db reconcile.DB, w io.Writer, opts Options) (reconcile.Report, error) {
	return reconcile.Run(ctx, db, w, opts.Options, Checks(opts)...)
}
