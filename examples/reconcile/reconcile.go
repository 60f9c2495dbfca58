package reconcile

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers/execution"
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
	// CheckStuckJobs: no job stays unfinished, its record unchanged, for
	// longer than Options.StuckAfter.
	CheckStuckJobs = "stuck_jobs"
)

// DefaultProgressEvery is Options.ProgressEvery's default.
const DefaultProgressEvery = 10000

// DB is the PostgreSQL handle reconcile reads through. A *pgxpool.Pool
// satisfies it.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Options adjust a run. The zero value checks the database alone.
type Options struct {
	// ProgressEvery is how many rows a check reads between two progress
	// lines. Default DefaultProgressEvery.
	ProgressEvery int
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
	// StuckAfter, when > 0, enables CheckStuckJobs: every job that has not
	// finished (queued, processing, retrying) and whose record has not
	// changed for longer than StuckAfter is a violation. Default 0, off.
	StuckAfter time.Duration
	// TaskState, if set, says where the queue holds a job's task: its
	// state ("pending", "active", "retry", …) or "" when the queue has
	// none. CheckStuckJobs names it for each stuck job; without it the
	// report says the task was not looked up.
	TaskState func(ctx context.Context, queue, jobID string) (string, error)
}

func (o Options) withDefaults() Options {
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	return o
}

// Violation is one broken invariant.
type Violation struct {
	// Check is the check that found it (CheckInvoices, …).
	Check string
	// IDs are the ids involved, the entity first (an order id, a SKU, a
	// payment id, a job key, scoped to its tenant: "acme/o-1"), then the
	// rows it concerns.
	IDs []string
	// Detail says what is wrong, in a sentence.
	Detail string
	// Attempts are the attempts of the job behind the violation, from the
	// attempt ledger, oldest first: which worker ran it, with which fencing
	// token, and how each ended. Empty when the violation concerns no job,
	// or the ledger has none (expired with the retention).
	Attempts []execution.Entry

	// tenant and key name the job's business key, for the ledger.
	tenant, key string
}

func (v Violation) String() string {
	var b strings.Builder
	if len(v.IDs) == 0 {
		fmt.Fprintf(&b, "violation [%s]: %s", v.Check, v.Detail)
	} else {
		fmt.Fprintf(&b, "violation [%s] %s: %s", v.Check, strings.Join(v.IDs, " "), v.Detail)
	}
	for i, a := range v.Attempts {
		if i == maxAttemptsShown {
			fmt.Fprintf(&b, "\n  … %d more attempts (idemgate explain --job %s)", len(v.Attempts)-i, a.JobID)
			break
		}
		fmt.Fprintf(&b, "\n  %s", attemptLine(a))
	}
	return b.String()
}

// maxAttemptsShown bounds the attempt lines under one violation.
const maxAttemptsShown = 20

// attemptLine is one attempt under a violation: "attempt 2 token 4
// succeeded by worker-1 (job job_…)".
func attemptLine(a execution.Entry) string {
	line := fmt.Sprintf("attempt %d", a.Attempt)
	if a.FencingToken != 0 {
		line += fmt.Sprintf(" token %d", a.FencingToken)
	}
	outcome := string(a.Outcome)
	if outcome == "" {
		outcome = "unfinished"
	}
	line += " " + outcome
	if a.Worker != "" {
		line += " by " + a.Worker
	}
	line += " (job " + a.JobID + ")"
	if a.Error != "" {
		line += ": " + a.Error
	}
	return line
}

// Report is what a run found.
type Report struct {
	// Violations lists every violation, in the order found.
	Violations []Violation
	// Rows counts the rows each check read, by check.
	Rows map[string]int64
}

// Clean reports whether the run found no violation.
func (r Report) Clean() bool { return len(r.Violations) == 0 }

// Run checks every invariant in one read-only, repeatable-read snapshot of
// db, writes each violation as it is found, progress lines and a summary to
// w, and returns the report. Its error says a check could not run (the
// database, the partner source, w); violations are not errors. The CLI
// exits 1 when the report is not Clean.
func Run(ctx context.Context, db DB, w io.Writer, opts Options) (Report, error) {
	r := &run{w: w, opts: opts.withDefaults(), report: Report{Rows: map[string]int64{}}}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return r.report, fmt.Errorf("reconcile: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // read-only: nothing to keep
	// The snapshot is taken by the first statement: take it before asking
	// the partner, so every charge recorded in it had been applied by the
	// time the partner answers.
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		return r.report, fmt.Errorf("reconcile: snapshot: %w", err)
	}
	r.tx = tx
	checks := []struct {
		name string
		fn   func(context.Context) error
	}{
		{CheckInvoices, r.invoices},
		{CheckStock, r.stock},
		{CheckPayments, r.payments},
		{CheckJobs, r.jobs},
		{CheckJobEffects, r.jobEffects},
		{CheckEffectJobs, r.effectJobs},
		{CheckStuckJobs, r.stuckJobs},
		{CheckPartner, r.partner},
	}
	for _, c := range checks {
		before := len(r.report.Violations)
		if err := c.fn(ctx); err != nil {
			return r.report, fmt.Errorf("reconcile: %s: %w", c.name, err)
		}
		if err := r.flush(ctx, before); err != nil {
			return r.report, fmt.Errorf("reconcile: %s: attempts: %w", c.name, err)
		}
		if _, ok := r.report.Rows[c.name]; ok {
			r.printf("reconcile: %s: %d rows, %s\n", c.name, r.report.Rows[c.name], plural(len(r.report.Violations)-before, "violation"))
		}
	}
	if r.report.Clean() {
		r.printf("reconcile: clean\n")
	} else {
		r.printf("reconcile: %s\n", plural(len(r.report.Violations), "violation"))
	}
	if r.werr != nil {
		return r.report, fmt.Errorf("reconcile: write the report: %w", r.werr)
	}
	return r.report, nil
}

// run is one reconcile run.
type run struct {
	tx     pgx.Tx
	w      io.Writer
	opts   Options
	report Report
	werr   error // the first write to w that failed
}

func (r *run) printf(format string, args ...any) {
	if r.werr != nil {
		return
	}
	if _, err := fmt.Fprintf(r.w, format, args...); err != nil {
		r.werr = err
	}
}

// violation records a violation; it is printed when its check ends.
func (r *run) violation(check, detail string, ids ...string) {
	r.report.Violations = append(r.report.Violations, Violation{Check: check, IDs: ids, Detail: detail})
}

// jobViolation records a violation about the job of the business key
// (tenant, key): it is printed with that job's attempts.
func (r *run) jobViolation(check, tenant, key, detail string, ids ...string) {
	r.report.Violations = append(r.report.Violations, Violation{Check: check, IDs: ids, Detail: detail, tenant: tenant, key: key})
}

// flush reads the attempt ledger for the violations found since from,
// and prints them. It runs once a check's rows are closed: the snapshot's
// connection reads one result at a time.
func (r *run) flush(ctx context.Context, from int) error {
	for i := from; i < len(r.report.Violations); i++ {
		v := &r.report.Violations[i]
		if v.key != "" {
			attempts, err := execution.Attempts(ctx, r.tx, v.tenant, v.key)
			if err != nil {
				return err
			}
			v.Attempts = attempts
		}
		r.printf("%s\n", *v)
	}
	return nil
}

// row counts one row read by check and prints a progress line every
// ProgressEvery rows.
func (r *run) row(check string) {
	r.report.Rows[check]++
	if n := r.report.Rows[check]; n%int64(r.opts.ProgressEvery) == 0 {
		r.printf("reconcile: %s: %d rows checked\n", check, n)
	}
}

// scan runs query and calls each for every row, counting rows for check.
// The rows are read as they arrive, so a large table is never held in
// memory.
func (r *run) scan(ctx context.Context, check, query string, args []any, each func(pgx.Rows) error) error {
	if _, ok := r.report.Rows[check]; !ok {
		r.report.Rows[check] = 0
	}
	rows, err := r.tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r.row(check)
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
