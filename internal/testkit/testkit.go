package testkit

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/migrations"
)

// PostgresURL returns TEST_DATABASE_URL or skips the test.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return envOrSkip(t, "TEST_DATABASE_URL", "PostgreSQL")
}

// envOrSkip returns the variable name or skips the test that needs the
// service it points at.
func envOrSkip(t testing.TB, name, service string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skip(name + " not set: skipping " + service + " integration test (make test sets it)")
	}
	return v
}

// Postgres creates a schema of the test's own, applies idemgate's
// migrations in it, then more (a program's own, as `migrate up` does with
// extension.WithMigrations), and returns a connection URL whose
// search_path is that schema. The schema is dropped when the test ends.
// Tests in different packages can run at once without seeing each other's
// rows.
func Postgres(t testing.TB, more ...migrations.Set) string {
	t.Helper()
	u := EmptySchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	migrate(ctx, t, u, more)
	return u
}

// EmptySchema creates a schema of the test's own, with nothing in it, and
// returns a connection URL whose search_path is that schema. The schema is
// dropped when the test ends.
func EmptySchema(t testing.TB) string {
	t.Helper()
	base := PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	schema := "t_" + randomHex(8)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("testkit: open postgres: %v", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("testkit: create schema: %v", err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE")
	})
	return WithSearchPath(t, base, schema)
}

// migrate applies idemgate's migrations, then more, to the database (or
// schema) at dbURL.
func migrate(ctx context.Context, t testing.TB, dbURL string, more []migrations.Set) {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatalf("testkit: open postgres: %v", err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("testkit: migrate: %v", err)
	}
	for _, m := range more {
		if err := m.Up(ctx, db); err != nil {
			t.Fatalf("testkit: migrate %s: %v", m.Table, err)
		}
	}
}

// Pool opens a pgx pool on Postgres(t, more...), closed when the test
// ends.
func Pool(t testing.TB, more ...migrations.Set) *pgxpool.Pool {
	t.Helper()
	return PoolAt(t, Postgres(t, more...))
}

// PoolAt opens a pgx pool on dbURL, closed when the test ends: for a test
// that also hands the URL to the code under test.
func PoolAt(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("testkit: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// WithSearchPath returns dbURL with its search_path set to schema.
func WithSearchPath(t testing.TB, dbURL, schema string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("testkit: TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// RedisURL returns TEST_REDIS_URL or skips the test.
func RedisURL(t testing.TB) string {
	t.Helper()
	return envOrSkip(t, "TEST_REDIS_URL", "Redis")
}

// Redis returns a client on TEST_REDIS_URL, closed when the test ends.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL(t))
	if err != nil {
		t.Fatalf("testkit: TEST_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisCluster returns a cluster client on TEST_REDIS_CLUSTER_URL (a comma
// list of nodes), or skips the test.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	u := envOrSkip(t, "TEST_REDIS_CLUSTER_URL", "Redis Cluster")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(u, ",")})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a random key prefix so tests sharing one Redis never see
// each other's keys.
func Prefix() string { return "test:" + randomHex(6) + ":" }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
