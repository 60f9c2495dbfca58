package cli

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/stdlib" // and the database/sql driver "pgx"

	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/migrations"
)

func runMigrate(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, _ io.Writer) error {
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
		cfg, err := loadConfig(ext, *path, getenv, false)
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
	sets := extensionSets(ext)
	switch pos[0] {
	case "up":
		if err := migrations.Up(ctx, db); err != nil {
			return err
		}
		for _, m := range sets {
			if err := m.set.Up(ctx, db); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
		}
		fmt.Fprintln(stdout, "migrations applied")
		return status(ctx, db, sets, stdout)
	case "down":
		// A program's tables sit on idemgate's: its migrations roll back
		// first, the last added first.
		for i := len(sets) - 1; i >= 0; i-- {
			done, err := sets[i].set.Down(ctx, db)
			if err != nil {
				return fmt.Errorf("%s: %w", sets[i].name, err)
			}
			if done {
				fmt.Fprintf(stdout, "rolled back the latest migration of %s\n", sets[i].name)
				return nil
			}
		}
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
		return status(ctx, db, sets, stdout)
	}
}

// namedSet is a program's migrations as `migrate` shows them.
type namedSet struct {
	name string
	set  migrations.Set
}

func extensionSets(ext extension.Set) []namedSet {
	out := make([]namedSet, len(ext.Migrations))
	for i, m := range ext.Migrations {
		out[i] = namedSet{name: m.Name, set: migrations.Set{FS: m.FS, Table: m.Table}}
	}
	return out
}

// status writes idemgate's migrations, then each program set's under a
// line naming it and its version table.
func status(ctx context.Context, db *sql.DB, sets []namedSet, w io.Writer) error {
	if err := migrations.Status(ctx, db, w); err != nil {
		return err
	}
	for _, m := range sets {
		fmt.Fprintf(w, "%s (version table %s):\n", m.name, m.set.Table)
		if err := m.set.Status(ctx, db, w); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
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
