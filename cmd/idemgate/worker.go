package main

import (
	"context"
	"io"
)

func runWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return usagef("worker: not available yet")
}
