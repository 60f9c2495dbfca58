// Package migrations holds idemgate's numbered SQL migrations, embedded in
// the binary and applied with goose. Each file owns the tables of one
// package: the SQL for a table lives here and in the store that owns it.
//
//	err := migrations.Up(ctx, db)
package migrations
