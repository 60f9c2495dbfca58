package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Connection poolers. A transaction pooler breaks pgx's prepared statements, so
// a pool whose URL names no query mode refuses a connection through a pooler.
// An explicit mode is the operator's choice and is not second-guessed.
// Design: docs/design/postgres-store.md#connection-poolers

// errPreparedThroughPooler is why a pooled connection was refused.
var errPreparedThroughPooler = errors.New("database_url goes through a connection pooler (the server's process id is not the one the connection was given), " +
	"where pgx's default cache of prepared statements breaks: add default_query_exec_mode=exec to database_url " +
	"(or default_query_exec_mode=cache_statement if the pooler keeps sessions or prepared statements)")

// namesExecMode reports whether a connection string chooses pgx's query
// mode itself, as a URL parameter or a key=value pair.
func namesExecMode(dbURL string) bool {
	return strings.Contains(dbURL, "default_query_exec_mode")
}

// refusePooler is the pool's AfterConnect when database_url names no query
// mode.
func refusePooler(ctx context.Context, conn *pgx.Conn) error {
	pooled, err := throughPooler(ctx, conn.PgConn())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if pooled {
		return errPreparedThroughPooler
	}
	return nil
}

// throughPooler compares the server's process id with the one the
// connection was given. The query goes by the simple protocol: nothing is
// prepared.
func throughPooler(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	res, err := conn.Exec(ctx, "SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		return false, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return false, errors.New("pg_backend_pid(): unexpected answer")
	}
	pid, err := strconv.ParseUint(string(res[0].Rows[0][0]), 10, 32)
	if err != nil {
		return false, fmt.Errorf("pg_backend_pid(): %w", err)
	}
	return uint32(pid) != conn.PID(), nil
}

// poolerCheckTimeout bounds the first connection services.postgres makes
// to find a misconfigured pooler at start-up.
const poolerCheckTimeout = 2 * time.Second

// checkPooler connects once, so that a pool refused by refusePooler fails
// the command at start-up instead of every statement later. Any other
// failure is left for later, as before: a database that is down at
// start-up is reported by /readyz, not fatal.
func checkPooler(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, poolerCheckTimeout)
	defer cancel()
	if err := pool.Ping(ctx); errors.Is(err, errPreparedThroughPooler) {
		return usagef("%v", errPreparedThroughPooler)
	}
	return nil
}
