package idempotency

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// RunJanitor deletes j's expired records until ctx ends: batches of batch
// records back to back while a batch comes back full, then a pause of
// interval. A failed batch is logged and tried again after the pause. It
// returns nil when ctx ends, and an error only for a non-positive interval
// or batch. The caller runs it in a goroutine it owns and waits for.
func RunJanitor(ctx context.Context, j Janitor, interval time.Duration, batch int, logger *slog.Logger) error {
	if interval <= 0 || batch <= 0 {
		return fmt.Errorf("idempotency: janitor: interval %v and batch %d must be positive", interval, batch)
	}
	if logger == nil {
		logger = slog.Default()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		for ctx.Err() == nil {
			n, err := j.DeleteExpired(ctx, batch)
			if err != nil {
				if ctx.Err() == nil {
					logger.Warn("idempotency janitor: deleting expired records failed", "err", err)
				}
				break
			}
			if n > 0 {
				logger.Debug("idempotency janitor: deleted expired records", "count", n)
			}
			if n < batch {
				break
			}
		}
		timer.Reset(interval)
	}
}
