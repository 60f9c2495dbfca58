package topology

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// PgBouncer is a private pgbouncer in transaction pooling mode in front of
// the PostgreSQL server of TEST_DATABASE_URL: a server connection is lent
// to a client for one transaction only, so nothing a client leaves on its
// session (a prepared statement, a LISTEN, a SET) is there on its next
// transaction. Every database name passes through to that server, so a
// test reaches the database testkit.Database made for it by asking for
// it by name. PgBouncer 1.18 keeps no prepared statements across
// transactions and refuses startup parameters other than the few it
// knows (search_path among the refused).
type PgBouncer struct {
	Port int
	// Dir holds pgbouncer.ini, users.txt, the pid file and the Unix socket.
	Dir string
	p   *proc.Proc
	log string
}

// Pool sizes: a test suite's worth of clients shares a few server
// connections per database, so that several suites through several
// poolers stay well inside the shared server's max_connections.
const (
	pgbouncerMaxClients = 500
	pgbouncerPoolSize   = 8
)

// StartPgBouncer starts pgbouncer on a free loopback port and returns once
// it answers. It trusts every client (auth_type trust; the server behind
// trusts loopback too) and only opens and closes server connections: the
// shared PostgreSQL is otherwise untouched. It is stopped when the test
// ends, and its log shown if the test failed.
func StartPgBouncer(t testing.TB) *PgBouncer {
	t.Helper()
	bin := Binary(t, "pgbouncer")
	server, err := url.Parse(testkit.PostgresURL(t))
	if err != nil {
		t.Fatalf("topology: TEST_DATABASE_URL: %v", err)
	}
	host, port := server.Hostname(), server.Port()
	if port == "" {
		port = "5432"
	}
	dbUser := server.User.Username()
	if dbUser == "" {
		dbUser = "postgres"
	}
	listen, err := proc.FreePort()
	if err != nil {
		t.Fatalf("topology: pgbouncer: %v", err)
	}
	dir := t.TempDir()
	as, err := unprivileged(dir)
	if err != nil {
		t.Fatalf("topology: pgbouncer: %v", err)
	}
	b := &PgBouncer{Port: listen, Dir: dir, log: filepath.Join(dir, "pgbouncer.log")}
	in := func(name string) string { return filepath.Join(dir, name) }
	// server_login_retry is short because the server is up; a closed
	// server connection is then replaced at once.
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir = %s
pidfile = %s
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = %d
default_pool_size = %d
max_db_connections = %d
reserve_pool_size = 0
server_idle_timeout = 10
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
`, host, port, listen, dir, in("pgbouncer.pid"), in("users.txt"),
		pgbouncerMaxClients, pgbouncerPoolSize, pgbouncerPoolSize)
	files := map[string]string{
		"pgbouncer.ini": conf,
		"users.txt":     fmt.Sprintf("%q \"\"\n", dbUser),
	}
	for name, text := range files {
		if err := os.WriteFile(in(name), []byte(text), 0o644); err != nil {
			t.Fatalf("topology: pgbouncer: %v", err)
		}
	}
	logf, err := os.Create(b.log)
	if err != nil {
		t.Fatalf("topology: pgbouncer: %v", err)
	}
	p, err := proc.Start(proc.Spec{Name: "pgbouncer", Path: bin, Args: []string{in("pgbouncer.ini")}, Dir: dir, Log: logf, As: as, Env: proc.ChildEnv()})
	_ = logf.Close() // the child has its own copy
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	b.p = p
	t.Cleanup(func() {
		p.Stop(syscall.SIGINT, 5*time.Second)
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", tail(b.log, 40))
		}
	})
	// The database of TEST_DATABASE_URL answers through the pooler once
	// it is up.
	probe := b.URL(server.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = proc.WaitUntil(ctx, 30*time.Second, "pgbouncer ready", p, func(ctx context.Context) error {
		cc, err := pgx.ParseConfig(probe)
		if err != nil {
			return err
		}
		cc.DefaultQueryExecMode = pgx.QueryExecModeExec
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return conn.Ping(ctx)
	})
	if err != nil {
		t.Fatalf("topology: %v\n%s", err, tail(b.log, 40))
	}
	return b
}

// Addr is the pooler's host:port.
func (b *PgBouncer) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.Port) }

// URL is dbURL, a postgres:// URL on the server behind, with the pooler's
// address instead: the same user, database and parameters. It adds no
// default_query_exec_mode; a test that goes through the pooler says which
// mode it means.
func (b *PgBouncer) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Host = b.Addr()
	return u.String()
}

// Log is the tail of pgbouncer's log.
func (b *PgBouncer) Log() string { return tail(b.log, 40) }

// unprivileged returns the credential to run a server as and hands it dir:
// nil when the suite is not root; as root, the postgres user (nobody
// without one), since pgbouncer refuses to run as root. The directories
// above dir, private to the test, are made traversable (not readable) so
// that user can reach dir.
func unprivileged(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return nil, fmt.Errorf("running as root, pgbouncer needs an unprivileged user: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	for d := filepath.Dir(dir); d != "/" && d != "." && d != os.TempDir(); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return nil, err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				return nil, err
			}
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tail is the last n lines of the file at path, or why it could not be
// read.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
