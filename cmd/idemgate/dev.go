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
func runDev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runProcess(ctx, "dev", "idemgate", args, getenv, stdout, stderr, func(p process) error {
		cfg := p.cfg
		partner, err := url.Parse(cfg.Worker.PartnerURL)
		if err != nil || partner.Host == "" {
			return usagef("worker.partner_url %q: dev mode runs partnersim there, so it must be http://HOST:PORT", cfg.Worker.PartnerURL)
		}
		g, err := buildGateway(ctx, cfg, p.logger, p.svc, p.cl, true, false)
		if err != nil {
			return err
		}
		w, err := buildWorker(ctx, cfg, p.logger, p.svc)
		if err != nil {
			return err
		}
		servers := append(g.servers(cfg),
			server{name: "partnersim", addr: partner.Host, handler: partnersim.New(partnersim.Options{})},
			w.adminServer(cfg))
		return runAll(ctx, cfg, p.logger, stdout, &p.svc.certs, g.store, servers, w.srv.Run, w.relay.Run, w.ledgerJanitor)
	})
}
