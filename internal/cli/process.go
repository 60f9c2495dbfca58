package cli

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/extension"
)

// process is what a long-running command runs on.
type process struct {
	cfg    *config.Config
	ext    extension.Set
	logger *slog.Logger
	// svc opens each service on first use.
	svc *services
	// cl releases whatever the command opened, when it ends.
	cl *closers
}

// runProcess is the one frame of the commands that run until ctx ends
// (serve, worker, dev), so that they load, trace and shut down alike. It
// parses the command's flags (loadCommand, with the command's own in
// moreFlags), starts tracing under the name service and runs body.
// Whatever body opened is released, last opened first, before the error
// the command ends with is logged in the log's format (logExit).
func runProcess(ctx context.Context, ext extension.Set, name, service string, args []string, getenv func(string) string, stdout, stderr io.Writer, body func(process) error, moreFlags ...func(*flag.FlagSet)) (err error) {
	cfg, logger, err := loadCommand(ext, name, args, getenv, stdout, stderr, moreFlags...)
	if err != nil {
		return err
	}
	logger, stopLog := bufferLog(cfg, logger, stderr)
	defer stopLog() // after the exit's own line
	defer func() { err = logExit(cfg, logger, err) }()
	var cl closers
	defer cl.close()
	stopTracing, err := startTracing(ctx, service, getenv, logger)
	if err != nil {
		return err
	}
	cl.push(stopTracing)
	return body(process{cfg: cfg, ext: ext, logger: logger, svc: newServices(cfg, &cl), cl: &cl})
}
