package examples

import "github.com/idemgate/idemgate/migrations"

// tables are the example tables' migrations, as testkit applies them after
// idemgate's own.
func tables() migrations.Set {
	m := Migrations()
	return migrations.Set{FS: m.FS, Table: m.Table}
}
