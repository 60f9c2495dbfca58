package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/telemetry"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var pprof bool
	cfg, logger, err := loadCommand("serve", args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&pprof, "pprof", false, "serve CPU and allocation profiles at /debug/pprof/ on the admin listener (admin token required)")
	})
	if err != nil {
		return err
	}
	stopTracing, err := startTracing(ctx, "idemgate-gateway", getenv, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	g, err := openGateway(ctx, cfg, logger, false, pprof)
	if err != nil {
		return err
	}
	defer g.close()
	return runAll(ctx, cfg, logger, stdout, g.svc.store, g.servers(cfg))
}

// loadCommand parses a command's flags (--config, --log-format,
// --log-level and moreFlags), loads the file and makes the logger.
func loadCommand(name string, args []string, getenv func(string) string, stdout, stderr io.Writer, moreFlags ...func(*flag.FlagSet)) (*config.Config, *slog.Logger, error) {
	fs := newFlags(name, name+" --config FILE", stdout)
	path := fs.String("config", "", "configuration file (YAML)")
	logFormat := fs.String("log-format", "", "json or text: overrides log.format")
	logLevel := fs.String("log-level", "", "debug, info, warn or error: overrides log.level")
	for _, f := range moreFlags {
		f(fs)
	}
	if _, err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	switch *logFormat {
	case "", "json", "text":
	default:
		return nil, nil, usagef("--log-format %q: want json or text", *logFormat)
	}
	switch *logLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, nil, usagef("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	cfg, err := loadConfig(*path, getenv, name == "worker" || name == "dev")
	if err != nil {
		return nil, nil, err
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	if *logLevel != "" {
		cfg.Log.Level = *logLevel
	}
	logger := newLogger(cfg, stderr)
	for _, w := range cfg.Warnings() {
		logger.Warn("configuration: " + w)
	}
	return cfg, logger, nil
}

// openedGateway is a built gateway and the services it uses.
type openedGateway struct {
	*gateway.Gateway
	svc *services
}

func (g *openedGateway) close() {
	_ = g.Gateway.Close(context.Background())
	g.svc.Close()
}

func (g *openedGateway) servers(cfg *config.Config) []server {
	return []server{
		{name: "public", addr: cfg.Listen, handler: telemetry.HTTPHandler(g.Handler())},
		{name: "admin", addr: cfg.AdminListen, handler: g.AdminHandler()},
	}
}

// openGateway connects the gateway's services and builds it.
func openGateway(ctx context.Context, cfg *config.Config, logger *slog.Logger, needPostgres, pprof bool) (*openedGateway, error) {
	svc, err := openServices(ctx, cfg, needPostgres)
	if err != nil {
		return nil, err
	}
	opts, err := gatewayOptions(cfg, svc, logger)
	if err != nil {
		svc.Close()
		return nil, err
	}
	opts.OpenAPI, opts.OpenAPIJSON, err = servedSpec(cfg)
	if err != nil {
		svc.Close()
		return nil, err
	}
	opts.Pprof = pprof
	g, err := gateway.New(opts)
	if err != nil {
		svc.Close()
		return nil, usagef("%v", err)
	}
	if cfg.RedisURL != "" {
		closeQueues, err := mountQueues(g, cfg.RedisURL)
		if err != nil {
			svc.Close()
			return nil, err
		}
		svc.close = append(svc.close, closeQueues)
	}
	return &openedGateway{Gateway: g, svc: svc}, nil
}

// servedSpec is the OpenAPI description the gateway serves: its own
// endpoints and each configured enqueue route with its job's schema.
func servedSpec(cfg *config.Config) (yamlDoc, jsonDoc []byte, err error) {
	var routes []openapi.JobRoute
	for _, r := range cfg.Routes {
		if r.Enqueue == nil {
			continue
		}
		spec, ok := cfg.Job(r.Enqueue.Task)
		if !ok {
			continue // refused when the configuration was loaded
		}
		path := r.Path
		if path == "" {
			path = r.PathPrefix
		}
		routes = append(routes, openapi.JobRoute{Name: r.Name, Path: path, Prefix: r.PathPrefix != "",
			Methods: r.Methods, Task: spec.Task, Schema: spec.Schema.JSON()})
	}
	yamlDoc, jsonDoc, err = openapi.WithJobRoutes(openapi.Spec, routes)
	if err != nil {
		return nil, nil, fmt.Errorf("openapi: describing the enqueue routes: %w", err)
	}
	return yamlDoc, jsonDoc, nil
}

// server is one listener of the process.
type server struct {
	name, addr string
	handler    http.Handler
}

// serve listens on every server (an empty address is off), runs the
// janitor when the store has one, and on ctx's end shuts down gracefully:
// no new connections, in-flight requests finish and store their records.
func serve(ctx context.Context, cfg *config.Config, logger *slog.Logger, stdout io.Writer, store idempotency.Store, servers []server) error {
	var (
		wg   sync.WaitGroup
		errc = make(chan error, len(servers))
		srvs []*http.Server
	)
	for _, s := range servers {
		if s.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			for _, srv := range srvs {
				_ = srv.Close()
			}
			wg.Wait()
			return fmt.Errorf("%s listener: %w", s.name, err)
		}
		srv := &http.Server{
			Handler:           s.handler,
			ReadHeaderTimeout: time.Duration(cfg.Server.ReadHeaderTimeout),
			ReadTimeout:       time.Duration(cfg.Server.ReadTimeout),
			WriteTimeout:      time.Duration(cfg.Server.WriteTimeout),
			IdleTimeout:       time.Duration(cfg.Server.IdleTimeout),
			MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		srvs = append(srvs, srv)
		fmt.Fprintf(stdout, "idemgate: %s listening on http://%s\n", s.name, ln.Addr())
		logger.Info("listening", "listener", s.name, "addr", ln.Addr().String())
		wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", s.name, err)
			}
		})
	}

	janitorCtx, stopJanitor := context.WithCancel(ctx)
	defer stopJanitor()
	if j, ok := store.(idempotency.Janitor); ok {
		wg.Go(func() {
			_ = idempotency.RunJanitor(janitorCtx, j, time.Duration(cfg.Janitor.Interval), cfg.Janitor.Batch, logger)
		})
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopJanitor()
	logger.Info("shutting down", "timeout", cfg.Server.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Server.ShutdownTimeout))
	defer cancel()
	for _, srv := range srvs {
		if e := srv.Shutdown(shutdownCtx); e != nil {
			err = errors.Join(err, e)
			_ = srv.Close()
		}
	}
	wg.Wait()
	return err
}
