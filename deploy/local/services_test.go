// Package local holds the tests of the scripts that bring up the local
// services (services.sh): make run, make test and make stop use them.
package local

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// needServers skips a test on a machine without redis-server and
// PostgreSQL's server binaries, which services.sh would install with
// apt-get: a test does not install packages.
func needServers(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	if _, err := exec.LookPath("initdb"); err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
			t.Skip("PostgreSQL's server binaries are not installed")
		}
	}
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// stateDir is a private IDEMGATE_LOCAL_STATE that the user postgres can
// reach (services.sh runs PostgreSQL as postgres when run as root).
func stateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "state")
}

// services runs services.sh with args, the URLs and the state directory
// given, and returns its stdout.
func services(t *testing.T, state, redisURL, databaseURL string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "bash", append([]string{"./services.sh"}, args...)...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "REDIS_URL" && k != "DATABASE_URL" && k != "IDEMGATE_LOCAL_STATE" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "REDIS_URL="+redisURL, "DATABASE_URL="+databaseURL, "IDEMGATE_LOCAL_STATE="+state)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("services.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// pidIn reads the pid on the first line of a pid file.
func pidIn(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("pid file %s: %v", file, err)
	}
	return pid
}

// alive reports whether the process runs: it exists and is not a zombie
// (an ended process its parent has not reaped yet).
func alive(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return err == nil && !bytes.Contains(b, []byte("\nState:\tZ"))
}

func listening(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// answer checks that the Redis and the database at the URLs answer.
func answer(t *testing.T, redisURL, databaseURL string) {
	t.Helper()
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", redisURL, err)
	}
	conn, err := pgx.Connect(t.Context(), databaseURL)
	if err != nil {
		t.Fatalf("postgresql at %s: %v", databaseURL, err)
	}
	defer conn.Close(t.Context())
	var one int
	if err := conn.QueryRow(t.Context(), "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("postgresql at %s: select 1: %v", databaseURL, err)
	}
}

// start runs services.sh on free ports in a private state directory,
// checks that both services answer at the URLs it prints, and returns
// them with the processes it started. The test stops them on cleanup if
// it has not.
func start(t *testing.T) (state string, redisPort, pgPort int) {
	t.Helper()
	state = stateDir(t)
	redisPort, pgPort = freePort(t), freePort(t)
	redisURL := "redis://127.0.0.1:" + strconv.Itoa(redisPort) + "/0"
	databaseURL := "postgres://postgres@127.0.0.1:" + strconv.Itoa(pgPort) + "/idemgate_local?sslmode=disable"
	t.Cleanup(func() {
		if listening(redisPort) || listening(pgPort) {
			services(t, state, redisURL, databaseURL, "--stop")
		}
	})
	out := services(t, state, redisURL, databaseURL)
	if !strings.Contains(out, "REDIS_URL=redis://127.0.0.1:"+strconv.Itoa(redisPort)+"/0\n") ||
		!strings.Contains(out, "DATABASE_URL=postgres://postgres@127.0.0.1:"+strconv.Itoa(pgPort)+"/idemgate_local") {
		t.Fatalf("services.sh printed %q, want the URLs it was given", out)
	}
	if strings.Contains(out, "REDIS_CLUSTER_URL") {
		t.Fatalf("services.sh without --cluster printed %q", out)
	}
	answer(t, redisURL, databaseURL)
	return state, redisPort, pgPort
}

// stop runs services.sh --stop and checks that the processes start
// started are gone and their ports closed.
func stop(t *testing.T, state string, redisPort, pgPort int) {
	t.Helper()
	redisPid := pidIn(t, filepath.Join(state, "redis-"+strconv.Itoa(redisPort)+".pid"))
	pgPid := pidIn(t, filepath.Join(state, "postgres-"+strconv.Itoa(pgPort), "postmaster.pid"))
	services(t, state, "redis://127.0.0.1:1/0", "postgres://postgres@127.0.0.1:1/x", "--stop")
	for name, pid := range map[string]int{"redis": redisPid, "postgresql": pgPid} {
		if alive(pid) {
			t.Errorf("%s (pid %d) still runs after --stop", name, pid)
		}
	}
	for _, port := range []int{redisPort, pgPort} {
		if listening(port) {
			t.Errorf("port %d still accepts connections after --stop", port)
		}
	}
}

// make run's services on ports of their own: both answer, and --stop
// leaves no process and no port behind; a second start reuses the
// cluster it created, and stops again.
func TestServicesStartAndStop(t *testing.T) {
	needServers(t)
	state, redisPort, pgPort := start(t)
	stop(t, state, redisPort, pgPort)

	redisURL := "redis://127.0.0.1:" + strconv.Itoa(redisPort) + "/0"
	databaseURL := "postgres://postgres@127.0.0.1:" + strconv.Itoa(pgPort) + "/idemgate_local?sslmode=disable"
	services(t, state, redisURL, databaseURL)
	answer(t, redisURL, databaseURL)
	stop(t, state, redisPort, pgPort)
}

// On a machine with a distribution's PostgreSQL cluster (Debian's main,
// as pg_lsclusters lists it), a DATABASE_URL on another port gets a
// cluster of its own beside it: the distribution's clusters and their
// configuration are left as they were, and still run after --stop.
func TestServicesBesideDistributionCluster(t *testing.T) {
	needServers(t)
	out, err := exec.Command("pg_lsclusters", "-h").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Skip("no distribution PostgreSQL cluster (pg_lsclusters lists none)")
	}
	confs, _ := filepath.Glob("/etc/postgresql/*/*/*.conf")
	sums := map[string][32]byte{}
	for _, c := range confs {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		sums[c] = sha256.Sum256(b)
	}

	state, redisPort, pgPort := start(t)
	if got, _ := exec.Command("pg_lsclusters", "-h").Output(); !bytes.Equal(clusters(got), clusters(out)) {
		t.Errorf("pg_lsclusters changed:\n%s\nwas\n%s", got, out)
	}
	stop(t, state, redisPort, pgPort)

	for c, sum := range sums {
		b, err := os.ReadFile(c)
		if err != nil || sha256.Sum256(b) != sum {
			t.Errorf("%s was changed (%v)", c, err)
		}
	}
	if got, _ := exec.Command("pg_lsclusters", "-h").Output(); !bytes.Equal(clusters(got), clusters(out)) {
		t.Errorf("after --stop, pg_lsclusters lists\n%s\nwas\n%s", got, out)
	}
}

// clusters keeps version, name, port and status of pg_lsclusters' lines.
func clusters(out []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			b.WriteString(strings.Join(f[:4], " ") + "\n")
		}
	}
	return b.Bytes()
}
