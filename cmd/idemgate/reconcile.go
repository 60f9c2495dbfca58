package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemgate/idemgate/examples/reconcile"
	"github.com/idemgate/idemgate/job"
)

// defaultStuckAfter is --stuck-after's default.
const defaultStuckAfter = 15 * time.Minute

// runReconcile checks the business invariants and reports stuck jobs; any
// violation exits 1.
func runReconcile(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var partner string
	var grace, stuckAfter time.Duration
	cfg, _, err := loadCommand("reconcile", args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&partner, "partner", "", "also compare with the partner's own account of applied effects (partnersim: its base URL)")
		fs.DurationVar(&grace, "grace", 0, "leave effects younger than this out of the effect-without-job check (for a busy system)")
		fs.DurationVar(&stuckAfter, "stuck-after", defaultStuckAfter, "report unfinished jobs whose record has not changed for longer than this (0: do not)")
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
	var cl closers
	defer cl.close()
	svc := newServices(cfg, &cl)
	pool, err := svc.postgres(ctx)
	if err != nil {
		return err
	}
	opts := reconcile.Options{Grace: grace, StuckAfter: stuckAfter}
	if stuckAfter > 0 && cfg.RedisURL != "" {
		inspector, err := svc.queueInspector()
		if err != nil {
			return err
		}
		opts.TaskState = func(_ context.Context, queue, id string) (string, error) {
			return job.TaskState(inspector, queue, id)
		}
	}
	if partner != "" {
		if _, err := url.Parse(partner); err != nil {
			return usagef("--partner: %v", err)
		}
		opts.PartnerEffects = func(ctx context.Context) (map[string]int, error) { return partnerEffects(ctx, partner) }
	}
	report, err := reconcile.Run(ctx, pool, stdout, opts)
	if err != nil {
		return err
	}
	if !report.Clean() {
		return fmt.Errorf("reconcile: %d violation(s)", len(report.Violations))
	}
	return nil
}

// partnerEffects reads partnersim's GET /effects.
func partnerEffects(ctx context.Context, base string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/effects", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("partner effects: %s", resp.Status)
	}
	var out map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("partner effects: %w", err)
	}
	return out, nil
}
