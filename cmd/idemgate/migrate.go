package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/idemgate/idemgate/migrations"
)

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	fs := newFlags("migrate", "migrate up|down|status [--config FILE]", stdout)
	path := fs.String("config", "", "configuration file (YAML); without it DATABASE_DIRECT_URL, else DATABASE_URL, is used")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "up" && pos[0] != "down" && pos[0] != "status") {
		fs.Usage()
		return usagef("migrate: want one of up, down, status")
	}
	// Migrations take a session of their own: the direct connection when
	// there is one, since database_url may go through a pooler.
	key, dbURL := "database_direct_url", getenv("DATABASE_DIRECT_URL")
	if dbURL == "" {
		key, dbURL = "database_url", getenv("DATABASE_URL")
	}
	if *path != "" {
		cfg, err := loadConfig(*path, getenv, false)
		if err != nil {
			return err
		}
		key, dbURL = "database_direct_url", cfg.DatabaseDirectURL
		if dbURL == "" {
			key, dbURL = "database_url", cfg.DatabaseURL
		}
	}
	if dbURL == "" {
		return usagef("migrate: no database: set database_url in the config or DATABASE_URL")
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return usagef("%s: %v", key, err)
	}
	defer db.Close()
	switch pos[0] {
	case "up":
		if err := migrations.Up(ctx, db); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "migrations applied")
		return migrations.Status(ctx, db, stdout)
	case "down":
		done, err := migrations.Down(ctx, db)
		if err != nil {
			return err
		}
		if !done {
			fmt.Fprintln(stdout, "nothing to roll back")
		} else {
			fmt.Fprintln(stdout, "rolled back the latest migration")
		}
		return nil
	default:
		return migrations.Status(ctx, db, stdout)
	}
}
