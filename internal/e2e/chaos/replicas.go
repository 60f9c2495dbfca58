package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// Replicated deployments for the failover scenarios (failover.go): a
// Redis primary with a replica and a sentinel, a PostgreSQL primary with
// a standby. Each replica reads its primary's stream through a lag proxy
// (faultproxy's delay mode), so the replica is behind by exactly the
// proxy's delay, and a crash of the primary loses exactly that tail.

// masterName is the name the sentinel monitors the primary under.
const masterName = "chaos"

// redisHA is a Redis primary, two replicas behind a lag proxy, and one
// sentinel (quorum 1) that promotes a replica a second after the primary
// stops answering, and points the other at it. The gateways and workers
// find the master through the sentinel, as the docs' Sentinel
// deployment does. Two replicas, not one: after a failover the new
// primary still has one, which a write that waits for a replica
// (redis_wait) needs.
type redisHA struct {
	primary, sentinel *Redis
	replicas          []*Redis
	lag               *faultproxy.Proxy
}

// startRedisHA starts the three servers in dir, the replica lagging by
// lag, and returns once the replica is in sync and the sentinel knows it.
func startRedisHA(ctx context.Context, dir string, lag time.Duration) (_ *redisHA, err error) {
	ha := &redisHA{}
	defer func() {
		if err != nil {
			ha.close()
		}
	}()
	if ha.primary, err = StartRedis(ctx, filepath.Join(dir, "redis-primary"), false); err != nil {
		return nil, err
	}
	if ha.lag, err = faultproxy.New(ha.primary.Addr()); err != nil {
		return nil, err
	}
	_, lagPort, _ := strings.Cut(ha.lag.Addr(), ":")
	for i := range 2 {
		r, err := startRedisWith(ctx, filepath.Join(dir, fmt.Sprintf("redis-replica-%d", i+1)), func(r *Redis) {
			r.extra = []string{"--replicaof", "127.0.0.1", lagPort}
		})
		if err != nil {
			return nil, err
		}
		ha.replicas = append(ha.replicas, r)
		if err := waitRedisField(ctx, r, "master_link_status", "up"); err != nil {
			return nil, fmt.Errorf("redis replica: %w", err)
		}
	}
	sdir := filepath.Join(dir, "redis-sentinel")
	if ha.sentinel, err = startRedisWith(ctx, sdir, func(r *Redis) {
		// A sentinel rewrites its configuration as it learns the
		// topology: the file is its own.
		r.conf = filepath.Join(sdir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %[3]s 1000\n"+
			"sentinel failover-timeout %[3]s 5000\n",
			r.port, sdir, masterName, ha.primary.port)
		err = os.WriteFile(r.conf, []byte(text), 0o600)
	}); err != nil {
		return nil, err
	}
	err = proc.WaitUntil(ctx, 30*time.Second, "sentinel knows the replica", ha.sentinel.p, func(ctx context.Context) error {
		c := redis.NewSentinelClient(&redis.Options{Addr: ha.sentinel.Addr()})
		defer c.Close()
		replicas, err := c.Replicas(ctx, masterName).Result()
		if err == nil && len(replicas) != len(ha.replicas) {
			err = fmt.Errorf("knows %d replicas", len(replicas))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// Only now the lag: the replica's first full sync is not the test.
	ha.lag.SetDelay(lag)
	return ha, nil
}

// URL is redis_url in the failover form: the sentinel, the master's name.
func (ha *redisHA) URL() string {
	return fmt.Sprintf("redis://%s/0?master_name=%s", ha.sentinel.Addr(), masterName)
}

// crash is the primary's host dying: nothing moves on the replication
// stream from the instant of the crash, the primary is killed, and what
// the lag proxy held is lost. The sentinel then promotes the replica.
func (ha *redisHA) crash() {
	ha.lag.Freeze()
	ha.primary.Kill()
	ha.lag.DropHeld()
}

// waitPromoted waits until the sentinel names a replica as the master
// and that replica says it is one.
func (ha *redisHA) waitPromoted(ctx context.Context, d time.Duration) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: ha.sentinel.Addr()})
	defer c.Close()
	var promoted *Redis
	err := proc.WaitUntil(ctx, d, "sentinel failover", ha.sentinel.p, func(ctx context.Context) error {
		addr, err := c.GetMasterAddrByName(ctx, masterName).Result()
		if err != nil {
			return err
		}
		for _, r := range ha.replicas {
			if len(addr) == 2 && addr[0]+":"+addr[1] == r.Addr() {
				promoted = r
				return nil
			}
		}
		return fmt.Errorf("the sentinel names %v", addr)
	})
	if err != nil {
		return err
	}
	return waitRedisField(ctx, promoted, "role", "master", d)
}

func (ha *redisHA) close() {
	for _, r := range append([]*Redis{ha.sentinel, ha.primary}, ha.replicas...) {
		if r != nil {
			r.Close()
		}
	}
	if ha.lag != nil {
		_ = ha.lag.Close()
	}
}

// Addr is the server's host:port.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// startRedisWith is StartRedis with the server's settings changed by set
// before it starts; set may fill r.conf and r.extra.
func startRedisWith(ctx context.Context, dir string, set func(*Redis)) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH: the fault suite starts a private Redis (install redis-server, e.g. apt-get install redis-server)")
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, port: port, dir: dir, log: log}
	set(r)
	if err := r.Start(ctx); err != nil {
		_ = log.Close()
		return nil, err
	}
	return r, nil
}

// waitRedisField waits (20s, or d) until INFO replication says field:want.
func waitRedisField(ctx context.Context, r *Redis, field, want string, d ...time.Duration) error {
	within := 20 * time.Second
	if len(d) > 0 {
		within = d[0]
	}
	return proc.WaitUntil(ctx, within, field+" "+want, r.p, func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				if v == want {
					return nil
				}
				return fmt.Errorf("%s is %s", field, v)
			}
		}
		return fmt.Errorf("no %s in INFO replication", field)
	})
}

// pgHA is a PostgreSQL primary and a standby streaming from it through a
// lag proxy; with sync, the primary waits for the standby at each commit
// (synchronous_standby_names), so the lag is every commit's too.
type pgHA struct {
	primary, standby *Postgres
	lag              *faultproxy.Proxy
}

// startPgHA starts a primary in dir, creates database db on it, makes a
// standby of it with pg_basebackup -R through the lag proxy, and returns
// once the standby streams, with the lag and sync set.
func startPgHA(ctx context.Context, dir, db string, lag time.Duration, sync bool) (_ *pgHA, err error) {
	ha := &pgHA{}
	defer func() {
		if err != nil {
			ha.close()
		}
	}()
	if ha.primary, err = StartPostgres(ctx, filepath.Join(dir, "pg-primary")); err != nil {
		return nil, err
	}
	if err := ha.primary.CreateDatabase(ctx, db); err != nil {
		return nil, err
	}
	if ha.lag, err = faultproxy.New(ha.primary.Addr()); err != nil {
		return nil, err
	}
	if ha.standby, err = newPostgres(filepath.Join(dir, "pg-standby")); err != nil {
		return nil, err
	}
	// -R writes primary_conninfo from the connection used: the proxy's.
	_, lagPort, _ := strings.Cut(ha.lag.Addr(), ":")
	if err := ha.standby.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", lagPort, "-U", "postgres",
		"-D", ha.standby.data, "-R", "-X", "stream", "--no-sync"); err != nil {
		_ = ha.standby.log.Close()
		return nil, err
	}
	if err := ha.standby.Start(ctx); err != nil {
		_ = ha.standby.log.Close()
		return nil, err
	}
	conn, err := pgx.Connect(ctx, URL(ha.primary.Addr(), "postgres"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	err = proc.WaitUntil(ctx, 30*time.Second, "standby streaming", ha.standby.p, func(ctx context.Context) error {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d standbys streaming", n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if sync {
		for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return nil, fmt.Errorf("%s: %w", q, err)
			}
		}
	}
	ha.lag.SetDelay(lag)
	return ha, nil
}

// URL is a multi-host connection string for db, primary first, that only
// settles on a server accepting writes: after a promotion the processes
// find the new primary on their next connection, with no restart.
func (ha *pgHA) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s,%s/%s?sslmode=disable&target_session_attrs=read-write",
		ha.primary.Addr(), ha.standby.Addr(), db)
}

// crash is the primary's host dying with the lag's tail of WAL unsent.
func (ha *pgHA) crash() error {
	ha.lag.Freeze()
	err := ha.primary.Kill()
	ha.lag.DropHeld()
	return err
}

// promote is pg_ctl promote on the standby, waiting until it accepts writes.
func (ha *pgHA) promote(ctx context.Context) error {
	return ha.standby.run(ctx, "pg_ctl", "promote", "-D", ha.standby.data, "-w", "-t", "60")
}

func (ha *pgHA) close() {
	for _, pg := range []*Postgres{ha.standby, ha.primary} {
		if pg != nil && pg.log != nil {
			pg.Close()
		}
	}
	if ha.lag != nil {
		_ = ha.lag.Close()
	}
}
