package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/stdlib" // and the database/sql driver "pgx"

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
	if pos[0] != "status" {
		if err := needSession(ctx, db, key); err != nil {
			return err
		}
	}
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

// needSession refuses a database reached through a connection pooler for
// up and down: they hold the schema's session advisory lock while they
// migrate, and a transaction pooler would leave that lock on whichever
// server connection took it, for the next migration to wait on. Status
// takes no lock. The check is throughPooler's; a database that cannot be
// reached is left for the migration to report.
func needSession(ctx context.Context, db *sql.DB, key string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil
	}
	defer conn.Close()
	pooled := false
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		var err error
		pooled, err = throughPooler(ctx, c.Conn().PgConn())
		return err
	})
	if err != nil || !pooled {
		return nil
	}
	return usagef("migrate: %s goes through a connection pooler, and a migration holds a session lock: "+
		"set database_direct_url (or DATABASE_DIRECT_URL) to a direct connection to the database", key)
}
