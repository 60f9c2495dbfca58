package testkit

import (
	"log/slog"
	"os"
	"testing"
)

// Logger shows the decisions of the code under test, down to debug, with
// go test -v and hides them otherwise.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
