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

// DefaultProgressEvery is Options.ProgressEvery's default.
const DefaultProgressEvery = 10000

// DB is the PostgreSQL handle reconcile reads through. A *pgxpool.Pool
// satisfies it.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Options adjust a run. The zero value runs each check with no stuck-job
// report.
type Options struct {
	// ProgressEvery is how many rows a check reads between two progress
	// lines. Default DefaultProgressEvery.
	ProgressEvery int
	// StuckAfter, when > 0, enables StuckJobs: every job that has not
	// finished and whose record has not changed for longer than StuckAfter
	// is a violation. Default 0, off.
	StuckAfter time.Duration
	// TaskState, if set, says where the queue holds a job's task: its
	// state ("pending", "active", "retry", …) or "" when the queue has
	// none. StuckJobs names it for each stuck job; without it the report
	// says the task was not looked up.
	TaskState func(ctx context.Context, queue, jobID string) (string, error)
}

func (o Options) withDefaults() Options {
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	return o
}

// Check is one invariant, run over the snapshot. Name names it in the
// output and in Violation.Check; Run reads through the Snapshot and
// reports what it finds there. Its error says the check could not run;
// violations are not errors.
type Check struct {
	Name string
	Run  func(ctx context.Context, s *Snapshot) error
}

// Violation is one broken invariant.
type Violation struct {
	// Check is the check that found it.
	Check string
	// IDs are the ids involved, the entity first (an order id, a job
	// key, scoped to its tenant: "acme/o-1"), then the rows it concerns.
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

// Run runs checks, in order, in one read-only, repeatable-read snapshot of
// db, writes each violation as it is found, progress lines and a summary to
// w, and returns the report. Its error says a check could not run (the
// database, a check's own source, w); violations are not errors. The CLI
// exits 1 when the report is not Clean.
func Run(ctx context.Context, db DB, w io.Writer, opts Options, checks ...Check) (Report, error) {
	s := &Snapshot{w: w, opts: opts.withDefaults(), report: Report{Rows: map[string]int64{}}}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return s.report, fmt.Errorf("reconcile: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // read-only: nothing to keep
	// The snapshot is taken by the first statement: take it before any
	// check asks a source outside the database, so that everything the
	// snapshot records had happened by the time that source answers.
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		return s.report, fmt.Errorf("reconcile: snapshot: %w", err)
	}
	s.tx = tx
	for _, c := range checks {
		before := len(s.report.Violations)
		if err := c.Run(ctx, s); err != nil {
			return s.report, fmt.Errorf("reconcile: %s: %w", c.Name, err)
		}
		if err := s.flush(ctx, before); err != nil {
			return s.report, fmt.Errorf("reconcile: %s: attempts: %w", c.Name, err)
		}
		if _, ok := s.report.Rows[c.Name]; ok {
			s.printf("reconcile: %s: %d rows, %s\n", c.Name, s.report.Rows[c.Name], plural(len(s.report.Violations)-before, "violation"))
		}
	}
	if s.report.Clean() {
		s.printf("reconcile: clean\n")
	} else {
		s.printf("reconcile: %s\n", plural(len(s.report.Violations), "violation"))
	}
	if s.werr != nil {
		return s.report, fmt.Errorf("reconcile: write the report: %w", s.werr)
	}
	return s.report, nil
}

// Snapshot is what a check reads and reports through: the run's
// transaction and its report.
type Snapshot struct {
	tx     pgx.Tx
	w      io.Writer
	opts   Options
	report Report
	werr   error // the first write to w that failed
}

// Tx is the snapshot's read-only transaction.
func (s *Snapshot) Tx() pgx.Tx { return s.tx }

// Options are the run's options.
func (s *Snapshot) Options() Options { return s.opts }

func (s *Snapshot) printf(format string, args ...any) {
	if s.werr != nil {
		return
	}
	if _, err := fmt.Fprintf(s.w, format, args...); err != nil {
		s.werr = err
	}
}

// Violation records a violation; it is printed when its check ends.
func (s *Snapshot) Violation(check, detail string, ids ...string) {
	s.report.Violations = append(s.report.Violations, Violation{Check: check, IDs: ids, Detail: detail})
}

// JobViolation records a violation about the job of the business key
// (tenant, key): it is printed with that job's attempts.
func (s *Snapshot) JobViolation(check, tenant, key, detail string, ids ...string) {
	s.report.Violations = append(s.report.Violations, Violation{Check: check, IDs: ids, Detail: detail, tenant: tenant, key: key})
}

// flush reads the attempt ledger for the violations found since from,
// and prints them. It runs once a check's rows are closed: the snapshot's
// connection reads one result at a time.
func (s *Snapshot) flush(ctx context.Context, from int) error {
	for i := from; i < len(s.report.Violations); i++ {
		v := &s.report.Violations[i]
		if v.key != "" {
			attempts, err := execution.Attempts(ctx, s.tx, v.tenant, v.key)
			if err != nil {
				return err
			}
			v.Attempts = attempts
		}
		s.printf("%s\n", *v)
	}
	return nil
}

// row counts one row read by check and prints a progress line every
// ProgressEvery rows.
func (s *Snapshot) row(check string) {
	s.report.Rows[check]++
	if n := s.report.Rows[check]; n%int64(s.opts.ProgressEvery) == 0 {
		s.printf("reconcile: %s: %d rows checked\n", check, n)
	}
}

// Scan runs query and calls each for every row, counting rows for check
// (the summary line of a check that scanned says how many it read). The
// rows are read as they arrive, so a large table is never held in memory.
func (s *Snapshot) Scan(ctx context.Context, check, query string, args []any, each func(pgx.Rows) error) error {
	if _, ok := s.report.Rows[check]; !ok {
		s.report.Rows[check] = 0
	}
	rows, err := s.tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		s.row(check)
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
