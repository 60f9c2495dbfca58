package chaos

import (
	"context"
	"path/filepath"
	"time"

	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
)

// deployment is where one scenario's store and broker run: the URLs its
// processes are given, and the servers and proxies its fault acts on.
type deployment struct {
	databaseURL string // the gateways' and workers'
	checkURL    string // the suite's own reads of the jobs table
	redisURL    string
	// wire, when set, gives a member a configuration of its own (its own
	// proxy to a server, to cut it alone).
	wire func(name string, c clusterConfig) clusterConfig
	// proxy is between the processes and the shared PostgreSQL.
	proxy *faultproxy.Proxy
	// cuts are the members' own proxies, by member name.
	cuts     map[string]*faultproxy.Proxy
	redisHA  *redisHA
	pgHA     *pgHA
	redisAOF *Redis
	closers  []func()
}

func (d *deployment) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// sharedServers is the suite's own Redis, flushed, and a new database on
// its PostgreSQL behind a fault proxy.
func sharedServers(ctx context.Context, s *suite, dir, db string) (*deployment, error) {
	if err := s.pg.CreateDatabase(ctx, db); err != nil {
		return nil, err
	}
	if err := s.redis.Flush(ctx); err != nil {
		return nil, err
	}
	proxy, err := faultproxy.New(s.pg.Addr())
	if err != nil {
		return nil, err
	}
	return &deployment{
		databaseURL: URL(proxy.Addr(), db), checkURL: URL(s.pg.Addr(), db), redisURL: s.redis.URL(),
		proxy: proxy, closers: []func(){func() { _ = proxy.Close() }},
	}, nil
}

// withSentinel is a Redis primary, a replica lagging by lag and a
// sentinel, with the shared PostgreSQL (behind a fault proxy) for what
// lives there.
func withSentinel(lag time.Duration) func(context.Context, *suite, string, string) (*deployment, error) {
	return func(ctx context.Context, s *suite, dir, db string) (*deployment, error) {
		d, err := sharedServers(ctx, s, dir, db)
		if err != nil {
			return nil, err
		}
		ha, err := startRedisHA(ctx, dir, lag)
		if err != nil {
			d.close()
			return nil, err
		}
		d.redisHA, d.redisURL = ha, ha.URL()
		d.closers = append(d.closers, ha.close)
		return d, nil
	}
}

// withStandby is a PostgreSQL primary and a standby lagging by lag (and
// synchronous with sync), the processes on the multi-host URL, and the
// shared Redis.
func withStandby(lag time.Duration, sync bool) func(context.Context, *suite, string, string) (*deployment, error) {
	return func(ctx context.Context, s *suite, dir, db string) (*deployment, error) {
		if err := s.redis.Flush(ctx); err != nil {
			return nil, err
		}
		ha, err := startPgHA(ctx, dir, db, lag, sync)
		if err != nil {
			return nil, err
		}
		return &deployment{
			databaseURL: ha.URL(db), checkURL: ha.URL(db), redisURL: s.redis.URL(),
			pgHA: ha, closers: []func(){ha.close},
		}, nil
	}
}

// withAOF is a Redis of the scenario's own with the append-only file
// (fsync every second, Redis' default), and the shared PostgreSQL.
func withAOF(ctx context.Context, s *suite, dir, db string) (*deployment, error) {
	d, err := sharedServers(ctx, s, dir, db)
	if err != nil {
		return nil, err
	}
	r, err := StartRedis(ctx, filepath.Join(dir, "redis-aof"), true)
	if err != nil {
		d.close()
		return nil, err
	}
	d.redisAOF, d.redisURL = r, r.URL()
	d.closers = append(d.closers, r.Close)
	return d, nil
}

// cutOff gives each named member its own proxy to the server the
// scenario cuts it from (redis or postgres), so that one gateway or one
// worker loses the server while the others keep it.
func cutOff(server string, members ...string) func(context.Context, *suite, string, string) (*deployment, error) {
	return func(ctx context.Context, s *suite, dir, db string) (*deployment, error) {
		d, err := sharedServers(ctx, s, dir, db)
		if err != nil {
			return nil, err
		}
		d.cuts = map[string]*faultproxy.Proxy{}
		target := s.redis.Addr()
		if server == "postgres" {
			target = s.pg.Addr()
		}
		for _, m := range members {
			p, err := faultproxy.New(target)
			if err != nil {
				d.close()
				return nil, err
			}
			d.cuts[m] = p
			d.closers = append(d.closers, func() { _ = p.Close() })
		}
		d.wire = func(name string, c clusterConfig) clusterConfig {
			p, ok := d.cuts[name]
			if !ok {
				return c
			}
			if server == "postgres" {
				c.DatabaseURL = URL(p.Addr(), db)
			} else {
				c.RedisURL = "redis://" + p.Addr() + "/0"
			}
			return c
		}
		return d, nil
	}
}
