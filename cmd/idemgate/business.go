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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/examples"
	"github.com/idemgate/idemgate/examples/reconcile"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/workers"
)

// exampleHandlers returns the Go handlers of the four example jobs, as a
// program that declares them registers its own. onDedup, if set, counts
// notification.send's dedup window hits and misses.
func exampleHandlers(cfg *config.Config, pool *pgxpool.Pool, rdb redis.UniversalClient, onDedup func(bool)) (*workers.Handlers, error) {
	hs := workers.NewHandlers()
	err := examples.Register(hs, examples.Business{
		DB:         pool,
		Redis:      rdb,
		PartnerURL: cfg.Worker.PartnerURL,
		HTTPClient: &http.Client{Transport: telemetry.HTTPTransport(nil)},
		OnDedup:    onDedup,
	})
	if err != nil {
		return nil, err
	}
	return hs, nil
}

// runReconcile checks the business invariants; any violation exits 1.
func runReconcile(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var partner string
	var grace time.Duration
	cfg, _, err := loadCommand("reconcile", args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&partner, "partner", "", "also compare with the partner's own account of applied effects (partnersim: its base URL)")
		fs.DurationVar(&grace, "grace", 0, "leave effects younger than this out of the effect-without-job check (for a busy system)")
	})
	if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return usagef("reconcile: database_url is required")
	}
	pool, err := openPostgres(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := reconcile.Options{Grace: grace}
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
