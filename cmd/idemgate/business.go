package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/gateway/config"
	"github.com/idemgate/idemgate/workers"
)

func registerBusiness(mux *asynq.ServeMux, deps workers.Deps, cfg *config.Config, pool *pgxpool.Pool, rdb redis.UniversalClient, logger *slog.Logger) error {
	return nil
}

func runReconcile(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return usagef("reconcile: not wired")
}
