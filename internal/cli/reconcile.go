package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/reconcile"
)

// defaultStuckAfter is --stuck-after's default.
const defaultStuckAfter = 15 * time.Minute

// runReconcile reports the stuck jobs (reconcile.StuckJobs) and runs the
// checks ext adds (idemgate-examples: the example jobs' business
// invariants) in one snapshot; any violation exits 1.
func runReconcile(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var grace, stuckAfter time.Duration
	cfg, _, err := loadCommand(ext, "reconcile", args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&grace, "grace", 0, "leave effects younger than this out of the effect-without-job check (for a busy system)")
		fs.DurationVar(&stuckAfter, "stuck-after", defaultStuckAfter, "report unfinished jobs whose record has not changed for longer than this (0: do not)")
		for _, r := range ext.Reconcilers {
			if r.Flags != nil {
				r.Flags(fs)
			}
		}
	})
	if err != nil {
		return err
	}
	if stuckAfter < 0 {
		return usagef("--stuck-after %s: must not be negative (0 turns the stuck-job report off)", stuckAfter)
	}
	if cfg.DatabaseURL == "" {
		return usagef("reconcile: database_url is required")
	}
	var checks []reconcile.Check
	for _, r := range ext.Reconcilers {
		cs, err := r.Checks(extension.ReconcileOptions{Grace: grace})
		if err != nil {
			return usagef("reconcile: %v", err)
		}
		checks = append(checks, cs...)
	}
	if !slices.ContainsFunc(checks, func(c reconcile.Check) bool { return c.Name == reconcile.CheckStuckJobs }) {
		checks = append(checks, reconcile.StuckJobs())
	}
	var cl closers
	defer cl.close()
	svc := newServices(cfg, &cl)
	pool, err := svc.postgres(ctx)
	if err != nil {
		return err
	}
	opts := reconcile.Options{StuckAfter: stuckAfter}
	if stuckAfter > 0 && cfg.RedisURL != "" {
		inspector, err := svc.queueInspector()
		if err != nil {
			return err
		}
		opts.TaskState = func(_ context.Context, queue, id string) (string, error) {
			return job.TaskState(inspector, queue, id)
		}
	}
	report, err := reconcile.Run(ctx, pool, stdout, opts, checks...)
	if err != nil {
		return err
	}
	if !report.Clean() {
		return fmt.Errorf("reconcile: %d violation(s)", len(report.Violations))
	}
	return nil
}
