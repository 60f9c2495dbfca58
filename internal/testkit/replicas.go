package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PrivateRedis is a redis-server of the test's own, on a free loopback
// port, without persistence, stopped when the test ends: for the tests
// that need replicas they can stop (waits for replicas: redisstore's
// WithWait, job.BrokerWait), which the shared Redis has not.
type PrivateRedis struct {
	Port   int
	Client *redis.Client
	cmd    *exec.Cmd
}

// Addr is the server's host:port.
func (r *PrivateRedis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// startRedis starts a redis-server with extra arguments. A missing binary
// skips the test, unless TEST_TOPOLOGY says the binaries are installed.
func startRedis(t testing.TB, extra ...string) *PrivateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("TEST_TOPOLOGY") != "" {
			t.Fatalf("redis-server not in PATH: %v", err)
		}
		t.Skip("redis-server not in PATH: skipping the tests with private replicas")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir := t.TempDir()
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &PrivateRedis{Port: port, cmd: cmd}
	r.Client = redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() {
		_ = r.Client.Close()
		_ = cmd.Process.Signal(syscall.SIGCONT) // a test that failed while it was stopped
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "redis.log")); err == nil {
				t.Logf("redis %d log:\n%s", port, lastLines(string(b), 20))
			}
		}
	})
	Eventually(t, fmt.Sprintf("redis on %d", port), 30*time.Second, func() bool { return r.Client.Ping(t.Context()).Err() == nil })
	return r
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Stop freezes the server with SIGSTOP until the returned function, or the
// test's end, lets it go on. It plays a replica that stops acknowledging,
// as one stuck behind a slow link or a long pause does.
func (r *PrivateRedis) Stop(t testing.TB) (resume func()) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return func() { _ = r.cmd.Process.Signal(syscall.SIGCONT) }
}

// RedisReplicated starts a primary and a replica of it, and returns once
// the replica is in sync.
func RedisReplicated(t testing.TB) (primary, replica *PrivateRedis) {
	t.Helper()
	primary = startRedis(t)
	replica = startRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	WaitInSync(t, primary, replica)
	return primary, replica
}

// WaitInSync waits until primary counts replica as online: WAIT counts
// only such replicas (after a full sync, a replica is online once its
// first acknowledgement arrives, not when its own link is up).
func WaitInSync(t testing.TB, primary, replica *PrivateRedis) {
	t.Helper()
	Eventually(t, fmt.Sprintf("replica %d online", replica.Port), 30*time.Second, func() bool {
		info, err := primary.Client.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "port="+strconv.Itoa(replica.Port)+",state=online")
	})
}

// RedisClusterReplicated starts a Redis Cluster of two primaries, each with a
// replica, the slots split between the primaries, and returns once every
// node agrees the cluster is up.
func RedisClusterReplicated(t testing.TB) (primaries, replicas [2]*PrivateRedis) {
	t.Helper()
	ctx := t.Context()
	node := func() *PrivateRedis {
		return startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
	}
	for i := range primaries {
		primaries[i], replicas[i] = node(), node()
	}
	all := []*PrivateRedis{primaries[0], primaries[1], replicas[0], replicas[1]}
	for _, r := range all[1:] {
		if err := all[0].Client.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(r.Port)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := primaries[0].Client.Do(ctx, "cluster", "addslotsrange", 0, 8191).Err(); err != nil {
		t.Fatal(err)
	}
	if err := primaries[1].Client.Do(ctx, "cluster", "addslotsrange", 8192, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for i, r := range replicas {
		id, err := primaries[i].Client.ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		Eventually(t, "replica knows its primary", 30*time.Second, func() bool {
			return r.Client.ClusterReplicate(ctx, id).Err() == nil
		})
	}
	for _, r := range all {
		Eventually(t, fmt.Sprintf("cluster ok on %d", r.Port), 30*time.Second, func() bool {
			info, err := r.Client.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	for i, r := range replicas {
		WaitInSync(t, primaries[i], r)
	}
	return primaries, replicas
}

// RedisServer starts a redis-server of the test's own on a free loopback
// port, stopped when the test ends: for a process under test whose queue
// names cannot be made the test's own.
func RedisServer(t testing.TB) *PrivateRedis { return startRedis(t) }
