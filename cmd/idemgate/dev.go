package main

import (
	"context"
	"io"
	"net/url"

	"github.com/idemgate/idemgate/internal/partnersim"
)

// runDev runs the gateway, a worker and partnersim (on worker.partner_url)
// in one process, for trying idemgate out.
func runDev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, logger, err := loadCommand("dev", args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	partner, err := url.Parse(cfg.Worker.PartnerURL)
	if err != nil || partner.Host == "" {
		return usagef("worker.partner_url %q: dev mode runs partnersim there, so it must be http://HOST:PORT", cfg.Worker.PartnerURL)
	}
	stopTracing, err := startTracing(ctx, "idemgate", getenv, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	g, err := openGateway(ctx, cfg, logger, true, false)
	if err != nil {
		return err
	}
	defer g.close()
	w, err := openWorker(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer w.close()
	servers := append(g.servers(cfg),
		server{name: "partnersim", addr: partner.Host, handler: partnersim.New(partnersim.Options{})},
		server{name: "worker-admin", addr: cfg.Worker.AdminListen, handler: w.admin})
	return runAll(ctx, cfg, logger, stdout, g.svc.store, servers, w.srv.Run)
}
