package examples

import (
	"embed"
	"io/fs"

	"github.com/idemgate/idemgate/extension"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// MigrationTable is the goose version table of the example tables'
// migrations, apart from idemgate's own.
const MigrationTable = "idemgate_examples_version"

// Migrations are the migrations of the example jobs' tables (invoices,
// inventory_items, inventory_ledger, payments, notifications), for
// extension.WithMigrations: `idemgate-examples migrate up` applies them
// after idemgate's own.
func Migrations() extension.Migrations {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded folder is there, or this does not compile
	}
	return extension.Migrations{Name: "examples", Table: MigrationTable, FS: sub}
}
