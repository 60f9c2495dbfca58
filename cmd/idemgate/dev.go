package main

import (
	"context"
	"io"
	"net/url"

	"github.com/idemgate/idemgate/internal/partnersim"
)

// runDev runs the gateway, a worker and partnersim (on worker.partner_url)
// in one process, for trying idemgate out. The gateway and the worker share
// the process's services.
func runDev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	cfg, logger, err := loadCommand("dev", args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	defer func() { err = logExit(cfg, logger, err) }()
	partner, err := url.Parse(cfg.Worker.PartnerURL)
	if err != nil || partner.Host == "" {
		return usagef("worker.partner_url %q: dev mode runs partnersim there, so it must be http://HOST:PORT", cfg.Worker.PartnerURL)
	}
	var cl closers
	defer cl.close()
	stopTracing, err := startTracing(ctx, "idemgate", getenv, logger)
	if err != nil {
		return err
	}
	cl.push(stopTracing)
	svc := newServices(cfg, &cl)
	g, err := buildGateway(ctx, cfg, logger, svc, &cl, true, false)
	if err != nil {
		return err
	}
	w, err := buildWorker(ctx, cfg, logger, svc)
	if err != nil {
		return err
	}
	servers := append(g.servers(cfg),
		server{name: "partnersim", addr: partner.Host, handler: partnersim.New(partnersim.Options{})},
		w.adminServer(cfg))
	return runAll(ctx, cfg, logger, stdout, &svc.certs, g.store, servers, w.srv.Run, w.relay.Run, w.ledgerJanitor)
}
