package topology

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// MasterName is the name the sentinels monitor the primary under.
const MasterName = "mymaster"

// Sentinel is a Redis primary, a replica of it and three sentinels with a
// quorum of two, each a private redis-server on a free loopback port. The
// sentinels notice a primary that has not answered for a second and
// promote the replica; clients find the master by asking them.
type Sentinel struct {
	Primary   *RedisServer
	Replica   *RedisServer
	Sentinels []*RedisServer
}

// RedisServer is one redis-server process: a data node or a sentinel.
type RedisServer struct {
	Name string
	Port int
	Dir  string // its files and its log, redis.log
	p    *proc.Proc
}

// Addr is the server's host:port.
func (r *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Kill ends the server at once (SIGKILL).
func (r *RedisServer) Kill() { r.p.Kill() }

// Exited reports whether the server has ended.
func (r *RedisServer) Exited() bool { return r.p.Exited() }

// StartSentinel starts the primary, the replica and the sentinels, and
// returns once the replica is in sync and every sentinel knows the
// replica and the two other sentinels: a failover can then happen. All of
// it is stopped when the test ends, and the servers' logs are shown if it
// failed.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := Binary(t, "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := t.TempDir()
	s := &Sentinel{}
	var all []*RedisServer
	t.Cleanup(func() {
		for _, r := range all {
			r.p.Stop(syscall.SIGTERM, 5*time.Second)
		}
		if t.Failed() {
			for _, r := range all {
				redisLogTail(t, r.Name, filepath.Join(r.Dir, "redis.log"))
			}
		}
	})
	start := func(name string, args func(port int, dir string) ([]string, error)) *RedisServer {
		t.Helper()
		r, err := startRedisServer(ctx, bin, name, filepath.Join(base, name), args)
		if err != nil {
			t.Fatalf("topology: %v", err)
		}
		all = append(all, r)
		return r
	}
	data := func(extra ...string) func(int, string) ([]string, error) {
		return func(port int, dir string) ([]string, error) {
			return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
				"--appendonly", "no", "--dir", dir}, extra...), nil
		}
	}
	s.Primary = start("redis-primary", data())
	s.Replica = start("redis-replica", data("--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.Port)))
	for i := range 3 {
		s.Sentinels = append(s.Sentinels, start(fmt.Sprintf("sentinel-%d", i+1), func(port int, dir string) ([]string, error) {
			// A sentinel rewrites its configuration file as it learns
			// the topology, so the file is its own and writable.
			conf := filepath.Join(dir, "sentinel.conf")
			text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
				"sentinel monitor %s 127.0.0.1 %d 2\n"+
				"sentinel down-after-milliseconds %[3]s 1000\n"+
				"sentinel failover-timeout %[3]s 5000\n"+
				"sentinel parallel-syncs %[3]s 1\n",
				port, dir, MasterName, s.Primary.Port)
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		}))
	}
	if err := s.waitReady(ctx); err != nil {
		t.Fatalf("topology: sentinel: %v", err)
	}
	return s
}

// URL is redis_url in go-redis's failover form for database db: the
// first sentinel as the host, the others as addr parameters.
func (s *Sentinel) URL(db int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis://%s/%d?master_name=%s", s.Sentinels[0].Addr(), db, MasterName)
	for _, r := range s.Sentinels[1:] {
		b.WriteString("&addr=" + r.Addr())
	}
	return b.String()
}

// Master is the master's address according to the first sentinel that
// answers.
func (s *Sentinel) Master(ctx context.Context) (string, error) {
	var last error
	for _, r := range s.Sentinels {
		addr, err := sentinelQuery(ctx, r, func(ctx context.Context, c *redis.SentinelClient) ([]string, error) {
			return c.GetMasterAddrByName(ctx, MasterName).Result()
		})
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel names the master: %v", last)
}

// WaitPromoted waits up to d until every sentinel names the replica as
// the master and the replica says it is one.
func (s *Sentinel) WaitPromoted(ctx context.Context, d time.Duration) error {
	return proc.WaitUntil(ctx, d, "replica promoted", s.Replica.p, func(ctx context.Context) error {
		for _, r := range s.Sentinels {
			addr, err := sentinelQuery(ctx, r, func(ctx context.Context, c *redis.SentinelClient) ([]string, error) {
				return c.GetMasterAddrByName(ctx, MasterName).Result()
			})
			if err != nil {
				return err
			}
			if len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != s.Replica.Addr() {
				return fmt.Errorf("%s names %v as the master", r.Name, addr)
			}
		}
		role, err := replicationInfo(ctx, s.Replica, "role")
		if err != nil {
			return err
		}
		if role != "master" {
			return fmt.Errorf("the replica's role is %s", role)
		}
		return nil
	})
}

// waitReady waits until the replica is in sync with the primary and each
// sentinel has found the replica and the other two sentinels (they meet
// through the primary's hello channel, every two seconds).
func (s *Sentinel) waitReady(ctx context.Context) error {
	err := proc.WaitUntil(ctx, 20*time.Second, "replica in sync", s.Replica.p, func(ctx context.Context) error {
		link, err := replicationInfo(ctx, s.Replica, "master_link_status")
		if err == nil && link != "up" {
			err = fmt.Errorf("master_link_status %q", link)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, r := range s.Sentinels {
		err := proc.WaitUntil(ctx, 30*time.Second, r.Name+" knows the topology", r.p, func(ctx context.Context) error {
			replicas, err := sentinelQuery(ctx, r, func(ctx context.Context, c *redis.SentinelClient) ([]map[string]string, error) {
				return c.Replicas(ctx, MasterName).Result()
			})
			if err != nil {
				return err
			}
			others, err := sentinelQuery(ctx, r, func(ctx context.Context, c *redis.SentinelClient) ([]map[string]string, error) {
				return c.Sentinels(ctx, MasterName).Result()
			})
			if err != nil {
				return err
			}
			if len(replicas) != 1 || len(others) != len(s.Sentinels)-1 {
				return fmt.Errorf("knows %d replicas and %d other sentinels", len(replicas), len(others))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// startRedisServer starts redis-server with args(port, dir) on a free
// port, its log in dir, and waits until it answers PING.
func startRedisServer(ctx context.Context, bin, name, dir string, args func(port int, dir string) ([]string, error)) (*RedisServer, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	argv, err := args(port, dir)
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// The child holds its own descriptor; ours is not needed past Start.
	defer log.Close()
	p, err := proc.Start(proc.Spec{Name: name, Path: bin, Args: argv, Dir: dir, Log: log})
	if err != nil {
		return nil, err
	}
	r := &RedisServer{Name: name, Port: port, Dir: dir, p: p}
	if err := proc.WaitUntil(ctx, 20*time.Second, name+" ready", p, func(ctx context.Context) error {
		c := redisOneShot(r)
		defer c.Close()
		return c.Ping(ctx).Err()
	}); err != nil {
		p.Kill()
		return nil, err
	}
	return r, nil
}

// redisOneShot is a client for one question to r: one connection, no retries,
// so that a server still starting or gone is an error at once.
func redisOneShot(r *RedisServer) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second})
}

func sentinelQuery[T any](ctx context.Context, r *RedisServer, q func(context.Context, *redis.SentinelClient) (T, error)) (T, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second})
	defer c.Close()
	return q(ctx, c)
}

// replicationInfo is one field of r's INFO replication.
func replicationInfo(ctx context.Context, r *RedisServer, field string) (string, error) {
	c := redisOneShot(r)
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO replication has no %s", field)
}

// redisLogTail shows the end of a server's log in the test's output.
func redisLogTail(t testing.TB, name, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	const keep = 4000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	t.Logf("--- %s (%s), last lines:\n%s", name, filepath.Base(path), b)
}
