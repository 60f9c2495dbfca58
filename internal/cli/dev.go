package cli

import (
	"context"
	"io"

	"github.com/idemgate/idemgate/extension"
)

// runDev runs the gateway, a worker and the servers ext adds for trying
// idemgate out (idemgate-examples adds partnersim on worker.partner_url)
// in one process. The gateway and the worker share the process's
// services.
func runDev(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runProcess(ctx, ext, "dev", "idemgate", args, getenv, stdout, stderr, func(p process) error {
		cfg := p.cfg
		var extra []server
		for _, d := range ext.DevServers {
			addr, err := d.Addr()
			if err != nil {
				return usagef("%v", err)
			}
			extra = append(extra, server{name: d.Name, addr: addr, handler: d.Handler})
		}
		g, err := buildGateway(ctx, ext, cfg, p.logger, p.svc, p.cl, true, false)
		if err != nil {
			return err
		}
		w, err := buildWorker(ctx, ext, cfg, p.logger, p.svc)
		if err != nil {
			return err
		}
		servers := append(append(g.servers(cfg), extra...), w.adminServer(cfg))
		return runAll(ctx, cfg, p.logger, stdout, &p.svc.certs, g.store, servers, w.srv.Run, w.relay.Run, w.scheduler.Run, w.ledgerJanitor, w.callbacks.Run, w.dispatch, w.pauses.Run)
	})
}
