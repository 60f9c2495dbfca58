package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"

	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// Provider returns the goose provider of the embedded migrations on db,
// for tests that move a schema to a given version (DownTo, UpTo) to check
// what a migration does to the rows already there.
func Provider(db *sql.DB) (*goose.Provider, error) { return provider(db) }

func provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, files)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := provider(db)
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
	p, err := provider(db)
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
