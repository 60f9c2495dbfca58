package testkit

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/migrations"
)

// Database creates a database of the test's own on the server of
// TEST_DATABASE_URL, applies every migration in it and returns a direct
// URL to it, dropped when the test ends. Postgres isolates a test by a
// schema named in the search_path startup parameter, which a connection
// pooler like PgBouncer refuses or drops; a database of its own is
// reached by name alone, through the pooler as directly. Creating one
// takes longer than a schema: use it for the tests that need it.
func Database(t testing.TB, more ...migrations.Set) string {
	t.Helper()
	base := PostgresURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testkit: TEST_DATABASE_URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	name := "t_" + randomHex(8)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testkit: connect: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testkit: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("testkit: database %s not dropped: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		// FORCE ends the connections a pooler may still hold to it.
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testkit: database %s not dropped: %v", name, err)
		}
	})

	u.Path = "/" + name
	direct := u.String()
	migrate(ctx, t, direct, more)
	return direct
}
