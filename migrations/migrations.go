package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Set is one sequence of numbered migrations with a goose version table of
// its own: idemgate's (Product), or those a program built on idemgate adds
// for its own tables (extension.WithMigrations), which never mix with
// idemgate's.
type Set struct {
	// FS holds the .sql files at its root.
	FS fs.FS
	// Table is the goose version table; "" is goose's default,
	// goose_db_version, which idemgate's own migrations use.
	Table string
}

// Product is idemgate's own migrations, embedded.
func Product() Set { return Set{FS: files} }

// Provider returns the goose provider of the embedded migrations on db,
// for tests that move a schema to a given version (DownTo, UpTo) to check
// what a migration does to the rows already there.
func Provider(db *sql.DB) (*goose.Provider, error) { return Product().Provider(db) }

// Provider returns the goose provider of s on db.
func (s Set) Provider(db *sql.DB) (*goose.Provider, error) { return s.provider(db) }

func (s Set) provider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	if s.Table != "" {
		opts = append(opts, goose.WithTableName(s.Table))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, s.FS, opts...)
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
func (s Set) locked(ctx context.Context, db *sql.DB) (*goose.Provider, error) {
	var schema sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, fmt.Errorf("migrations: current schema: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID(schema.String)), lock.WithLockTimeout(1, lockWait))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return s.provider(db, goose.WithSessionLocker(locker))
}

// LockID is the advisory lock id that Up and Down hold while they migrate
// schema.
func LockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("idemgate migrations\x00" + schema))
	return int64(h.Sum64())
}

// Up applies every pending migration of idemgate's own.
func Up(ctx context.Context, db *sql.DB) error { return Product().Up(ctx, db) }

// Down rolls back the most recent migration of idemgate's own (Set.Down).
func Down(ctx context.Context, db *sql.DB) (bool, error) { return Product().Down(ctx, db) }

// Status writes the status of idemgate's own migrations (Set.Status).
func Status(ctx context.Context, db *sql.DB, w io.Writer) error { return Product().Status(ctx, db, w) }

// Up applies every pending migration of s.
func (s Set) Up(ctx context.Context, db *sql.DB) error {
	p, err := s.locked(ctx, db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	return nil
}

// Down rolls back the most recent migration of s. It reports false when
// there was nothing to roll back.
func (s Set) Down(ctx context.Context, db *sql.DB) (bool, error) {
	p, err := s.locked(ctx, db)
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

// Status writes one line per migration of s: its version, file and whether
// it is applied.
func (s Set) Status(ctx context.Context, db *sql.DB, w io.Writer) error {
	p, err := s.provider(db)
	if err != nil {
		return err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrations: status: %w", err)
	}
	for _, m := range st {
		applied := "pending"
		if m.State == goose.StateApplied {
			applied = "applied " + m.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(w, "%05d  %-40s %s\n", m.Source.Version, m.Source.Path, applied)
	}
	return nil
}
