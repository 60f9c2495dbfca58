package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/telemetry"
)

// startTracing installs the process's tracer provider (off unless an OTLP
// endpoint is configured); the returned stop flushes the spans left.
func startTracing(ctx context.Context, service string, getenv func(string) string, logger *slog.Logger) (stop func(), err error) {
	shutdown, err := telemetry.Setup(ctx, service, getenv)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			logger.Warn("traces not flushed", "err", err)
		}
	}, nil
}
