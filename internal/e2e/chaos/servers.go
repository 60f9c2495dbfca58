package chaos

import (
	"github.com/idemgate/idemgate/internal/testkit/proc"

	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The suite's own servers: a Redis and a PostgreSQL on free loopback
// ports, with their data in the suite's directory. They are the only
// servers it ever stops, flushes or restarts.

// Redis is a private redis-server.
type Redis struct {
	bin        string
	port       int
	dir        string
	appendOnly bool
	extra      []string // more redis-server arguments (replicas.go)
	conf       string   // a sentinel's configuration file: the server is a sentinel
	log        *os.File
	p          *proc.Proc
}

// StartRedis starts redis-server on a free port with its files in dir;
// appendOnly turns persistence on (the append-only file), otherwise a
// restart loses everything.
func StartRedis(ctx context.Context, dir string, appendOnly bool) (*Redis, error) {
	return startRedisWith(ctx, dir, func(r *Redis) { r.appendOnly = appendOnly })
}

// URL is the redis:// URL of database 0.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// Pid is the redis-server's process id, for reading its CPU time; 0
// before it started.
func (r *Redis) Pid() int {
	if r.p == nil {
		return 0
	}
	return r.p.Pid()
}

// Start starts the server (again, on the same port) and waits until it
// answers PING.
func (r *Redis) Start(ctx context.Context) error {
	appendOnly := "no"
	if r.appendOnly {
		appendOnly = "yes"
	}
	args := []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", appendOnly, "--dir", r.dir}
	if r.conf != "" {
		args = []string{r.conf, "--sentinel"}
	}
	p, err := proc.Start(proc.Spec{
		Name: "redis-server", Path: r.bin, Dir: r.dir, Log: r.log,
		Args: append(args, r.extra...),
	})
	if err != nil {
		return err
	}
	r.p = p
	return proc.WaitUntil(ctx, 20*time.Second, "redis-server ready", p, r.ping)
}

// ping sends one PING on a connection of its own (a client library would
// retry and log while the server is still starting).
func (r *Redis) ping(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", r.port))
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", got)
	}
	return nil
}

// Kill ends the server at once (SIGKILL): without persistence everything
// it held is gone.
func (r *Redis) Kill() {
	if r.p != nil {
		r.p.Kill()
	}
}

// Restart kills the server and starts it again on the same port.
func (r *Redis) Restart(ctx context.Context) error {
	r.Kill()
	return r.Start(ctx)
}

// Flush empties the server between scenarios.
func (r *Redis) Flush(ctx context.Context) error {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.port)})
	defer rdb.Close()
	return rdb.FlushAll(ctx).Err()
}

// Close stops the server for good.
func (r *Redis) Close() {
	r.Kill()
	_ = r.log.Close()
}

// Postgres is a private PostgreSQL cluster: initdb in a directory of the
// suite, then the postmaster as a child process. A stop goes through
// pg_ctl (so -m fast and -m immediate mean what they mean to an operator);
// a start runs the postmaster again as a child, which is what pg_ctl
// restart does, except that the suite keeps owning the process. The
// server keeps PostgreSQL's durable defaults (fsync, synchronous
// commits): a restart then takes as long as a real one, and an immediate
// shutdown loses no acknowledged commit.
type Postgres struct {
	bindir string
	dir    string // owned by the server's user
	data   string
	port   int
	extra  []string            // more postgres -c settings (StartPostgres, replicas.go)
	held   []int               // processes of the cluster HoldWALWriter stopped
	as     *syscall.Credential // nil: the suite's own user
	log    *os.File
	p      *proc.Proc
}

// StartPostgres creates a cluster in dir (initdb) and starts it on a free
// port. As root, the server runs as the postgres user, which then owns dir.
// Each of settings ("name=value") is passed to every start of the
// postmaster as a -c option.
func StartPostgres(ctx context.Context, dir string, settings ...string) (*Postgres, error) {
	pg, err := newPostgres(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range settings {
		pg.extra = append(pg.extra, "-c", s)
	}
	if err := pg.run(ctx, "initdb", "-D", pg.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		_ = pg.log.Close()
		return nil, err
	}
	if err := pg.Start(ctx); err != nil {
		_ = pg.log.Close()
		return nil, err
	}
	return pg, nil
}

// newPostgres prepares a server in dir on a free port, its data not yet
// created: its directory, owner and log.
func newPostgres(dir string) (*Postgres, error) {
	bindir, err := postgresBindir()
	if err != nil {
		return nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	pg := &Postgres{bindir: bindir, dir: dir, data: filepath.Join(dir, "data"), port: port}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, the private PostgreSQL needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.as = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if pg.log, err = os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	return pg, nil
}

// postgresBindir finds the directory holding initdb, pg_ctl and postgres:
// next to initdb on PATH, else the newest /usr/lib/postgresql/*/bin.
func postgresBindir() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	installed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(installed, func(a, b string) int { return versionOf(b) - versionOf(a) })
	dirs = append(dirs, installed...)
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb, pg_ctl and postgres not found on PATH or under /usr/lib/postgresql/*/bin: the fault suite starts a private PostgreSQL (install the server, e.g. apt-get install postgresql)")
}

func versionOf(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Addr is the server's host:port.
func (pg *Postgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", pg.port) }

// Pid is the postmaster's process id (the backends are its children),
// for reading the cluster's CPU time; 0 before it started.
func (pg *Postgres) Pid() int {
	if pg.p == nil {
		return 0
	}
	return pg.p.Pid()
}

// URL is a connection string for database db on addr (the server's own
// address, or a proxy's in front of it).
func URL(addr, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, db)
}

// Start runs the postmaster and waits until it accepts connections.
func (pg *Postgres) Start(ctx context.Context) error {
	p, err := proc.Start(proc.Spec{
		Name: "postgres", Path: filepath.Join(pg.bindir, "postgres"), Dir: pg.dir, Log: pg.log, As: pg.as,
		Args: append([]string{"-D", pg.data, "-p", strconv.Itoa(pg.port), "-k", pg.dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"}, pg.extra...),
	})
	if err != nil {
		return err
	}
	pg.p = p
	return proc.WaitUntil(ctx, 60*time.Second, "postgres ready", p, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, URL(pg.Addr(), "postgres"))
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
}

// Stop shuts the server down with pg_ctl stop -m mode (smart, fast or
// immediate) and waits for the postmaster to exit.
func (pg *Postgres) Stop(ctx context.Context, mode string) error {
	if pg.p == nil || pg.p.Exited() {
		return nil
	}
	if err := pg.run(ctx, "pg_ctl", "stop", "-D", pg.data, "-m", mode, "-w", "-t", "30"); err != nil {
		return err
	}
	if !pg.p.Wait(10 * time.Second) {
		return errors.New("postgres: still running after pg_ctl stop")
	}
	return nil
}

// Restart is pg_ctl restart -m mode: stop, then start with the same options.
func (pg *Postgres) Restart(ctx context.Context, mode string) error {
	if err := pg.Stop(ctx, mode); err != nil {
		return err
	}
	return pg.Start(ctx)
}

// CreateDatabase creates an empty database.
func (pg *Postgres) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, URL(pg.Addr(), "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// Kill ends the cluster at once, as the crash of its host would: SIGKILL
// to the postmaster and to every process it forked, and it returns once
// all of them are gone. The next Start runs crash recovery: what was
// written to the WAL files survives, what was still in shared memory (the
// WAL of a commit made with synchronous_commit off that nobody flushed
// yet) is lost.
//
// The backends are not in the postmaster's process group (each calls
// setsid), so signalling the group alone would leave them running,
// answering their clients and writing WAL, until they noticed the
// postmaster's death. Every process is stopped (SIGSTOP) before the first
// dies, so that none of them acts on another's death.
func (pg *Postgres) Kill() error {
	if pg.p == nil || pg.p.Exited() {
		return nil
	}
	postmaster := pg.p.Pid()
	// Stopped, the postmaster forks nothing more, and restarts nothing.
	if err := syscall.Kill(postmaster, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("postgres: stop the postmaster: %w", err)
	}
	children, err := proc.Children(postmaster)
	if err != nil {
		pg.p.Kill()
		return fmt.Errorf("postgres: list the postmaster's children: %w", err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		for _, pid := range children {
			_ = syscall.Kill(pid, sig) // ESRCH: it is already gone
		}
	}
	pg.p.Kill()
	pg.held = nil
	return proc.WaitGone(children, 30*time.Second)
}

// HoldWALWriter stops the WAL writer (SIGSTOP) until the cluster is
// killed or closed. A commit made with synchronous_commit off then stays
// in shared memory until a backend's synchronous commit writes it, and a
// Kill meanwhile loses it for certain: without the hold, the WAL writer
// would write it within wal_writer_delay.
func (pg *Postgres) HoldWALWriter() error {
	if pg.p == nil || pg.p.Exited() {
		return errors.New("postgres: not running")
	}
	children, err := proc.Children(pg.p.Pid())
	if err != nil {
		return fmt.Errorf("postgres: list the postmaster's children: %w", err)
	}
	for _, pid := range children {
		if proc.Command(pid) != "postgres: walwriter" {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("postgres: stop the WAL writer: %w", err)
		}
		pg.held = append(pg.held, pid)
		return nil
	}
	return errors.New("postgres: no WAL writer among the postmaster's children")
}

// Close stops the server for good: an immediate shutdown, then SIGKILL.
func (pg *Postgres) Close() {
	for _, pid := range pg.held {
		// A stopped process would ignore the shutdown until the
		// postmaster's SIGKILL, seconds later.
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	pg.held = nil
	if pg.p != nil {
		pg.p.Stop(syscall.SIGQUIT, 10*time.Second)
	}
	_ = pg.log.Close()
}

// tool is the path of one of the server's tools: in the server's bindir,
// else beside the real initdb (bindir may hold links to a few of them
// only), else on PATH.
func (pg *Postgres) tool(name string) string {
	path := filepath.Join(pg.bindir, name)
	if isExec(path) {
		return path
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(pg.bindir, "initdb")); err == nil && isExec(filepath.Join(filepath.Dir(real), name)) {
		return filepath.Join(filepath.Dir(real), name)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return path
}

// run runs one of the server's tools as the server's user, its output
// going to the server's log.
func (pg *Postgres) run(ctx context.Context, tool string, args ...string) error {
	cmd := exec.CommandContext(ctx, pg.tool(tool), args...)
	cmd.Dir = pg.dir
	cmd.Env = proc.ChildEnv()
	cmd.Stdout, cmd.Stderr = pg.log, pg.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: pg.as}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w (see %s)", tool, args, err, pg.log.Name())
	}
	return nil
}
