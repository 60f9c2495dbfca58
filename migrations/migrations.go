package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Provider returns the goose provider of the embedded migrations on db,
// for tests that move a schema to a given version (DownTo, UpTo) to check
// what a migration does to the rows already there.
func Provider(db *sql.DB) (*goose.Provider, error) { return provider(db) }

func provider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// lockWait is how long a migration waits for another one on the same
// schema to finish: as long as a deploy waits for its migration Job.
const lockWait = 15 * 60 // seconds, probed once a second

// locked is the provider of Up and Down: they hold a session advisory lock
// while they run, so two `idemgate migrate up` started at once (two deploy
// pipelines, a Job retried while the first still runs) apply each
// migration once, the second waiting and then finding nothing pending. The
// lock is the schema's own, its id derived from current_schema(), so
// migrations of other schemas in the database (one per test, a bench
// schema) never wait for each other. A session lock needs a session of its
// own: migrate runs on database_direct_url, never through a transaction
// pooler.
func locked(ctx context.Context, db *sql.DB) (*goose.Provider, error) {
	var schema sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, fmt.Errorf("migrations: current schema: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID(schema.String)), lock.WithLockTimeout(1, lockWait))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return provider(db, goose.WithSessionLocker(locker))
}

// LockID is the advisory lock id that Up and Down hold while they migrate
// schema.
func LockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("idemgate migrations\x00" + schema))
	return int64(h.Sum64())
}

// Up applies every pending migration.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := locked(ctx, db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	return nil
}

// Down rolls back the most recent migration. It reports false when there was
// nothing to roll back.
func Down(ctx context.Context, db *sql.DB) (bool, error) {
	p, err := locked(ctx, db)
	if err != nil {
		return false, err
	}
	if _, err := p.Down(ctx); err != nil {
		if errors.Is(err, goose.ErrNoNextVersion) {
			return false, nil
		}
		return false, fmt.Errorf("migrations: down: %w", err)
	}
	return true, nil
}

// Status writes one line per migration: its version, file and whether it is
// applied.
func Status(ctx context.Context, db *sql.DB, w io.Writer) error {
	p, err := provider(db)
	if err != nil {
		return err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrations: status: %w", err)
	}
	for _, s := range st {
		applied := "pending"
		if s.State == goose.StateApplied {
			applied = "applied " + s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(w, "%05d  %-40s %s\n", s.Source.Version, s.Source.Path, applied)
	}
	return nil
}
