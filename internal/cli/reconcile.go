package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/job"
)

// defaultStuckAfter is --stuck-after's default.
const defaultStuckAfter = 15 * time.Minute

// runReconcile runs the invariant checks ext adds (idemgate-examples: the
// example jobs' business invariants and the stuck jobs); any violation
// exits 1.
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
	if len(ext.Reconcilers) == 0 {
		fmt.Fprintln(stdout, "reconcile: this binary adds no checks (a binary built with extension.WithReconcile does; idemgate-examples checks the example jobs')")
		return nil
	}
	var cl closers
	defer cl.close()
	svc := newServices(cfg, &cl)
	pool, err := svc.postgres(ctx)
	if err != nil {
		return err
	}
	opts := extension.ReconcileOptions{Grace: grace, StuckAfter: stuckAfter}
	if stuckAfter > 0 && cfg.RedisURL != "" {
		inspector, err := svc.queueInspector()
		if err != nil {
			return err
		}
		opts.TaskState = func(_ context.Context, queue, id string) (string, error) {
			return job.TaskState(inspector, queue, id)
		}
	}
	violations := 0
	for _, r := range ext.Reconcilers {
		n, err := r.Run(ctx, pool, stdout, opts)
		if err != nil {
			return err
		}
		violations += n
	}
	if violations > 0 {
		return fmt.Errorf("reconcile: %d violation(s)", violations)
	}
	return nil
}
