package main

import (
	"context"
	"io"
	"net/url"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/partnersim"
	"github.com/idemgate/idemgate/openapi"
)

// runDev runs the gateway, a worker and partnersim (on worker.partner_url)
// in one process, for trying idemgate out.
func runDev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", "dev --config FILE", stdout)
	path := fs.String("config", "", "configuration file (YAML)")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, getenv)
	if err != nil {
		return err
	}
	partner, err := url.Parse(cfg.Worker.PartnerURL)
	if err != nil || partner.Host == "" {
		return usagef("worker.partner_url %q: dev mode runs partnersim there, so it must be http://HOST:PORT", cfg.Worker.PartnerURL)
	}
	logger := newLogger(cfg, stderr)
	for _, w := range cfg.Warnings() {
		logger.Warn("configuration: " + w)
	}
	svc, err := openServices(ctx, cfg, true)
	if err != nil {
		return err
	}
	defer svc.Close()
	opts, err := gatewayOptions(cfg, svc, logger)
	if err != nil {
		return err
	}
	opts.OpenAPI = openapi.Spec
	g, err := gateway.New(opts)
	if err != nil {
		return usagef("%v", err)
	}
	defer func() { _ = g.Close(context.Background()) }()
	w, err := openWorker(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer w.close()
	return runAll(ctx, cfg, logger, stdout, svc.store, []server{
		{name: "partnersim", addr: partner.Host, handler: partnersim.New(partnersim.Options{})},
		{name: "public", addr: cfg.Listen, handler: g.Handler()},
		{name: "admin", addr: cfg.AdminListen, handler: g.AdminHandler()},
		{name: "worker-admin", addr: cfg.Worker.AdminListen, handler: w.admin},
	}, w.srv.Run)
}
