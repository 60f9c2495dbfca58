package testkit

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
)

// Proxied puts a fault proxy in front of the host of rawURL (a redis://
// or postgres:// URL) and returns the URL that goes through it, for a
// test that cuts or freezes one client's network. The proxy is closed
// when the test ends, thawed first.
func Proxied(t testing.TB, rawURL string) (string, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("testkit: proxied URL: %v", err)
	}
	proxy, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatalf("testkit: fault proxy: %v", err)
	}
	t.Cleanup(func() {
		proxy.Thaw()
		_ = proxy.Close()
	})
	u.Host = proxy.Addr()
	return u.String(), proxy
}

// ProxiedPool opens a pool of at most four connections on dbURL, every
// connection going through the returned fault proxy (Proxied);
// configure, when not nil, adjusts the pool's config. The pool is closed
// when the test ends, before the proxy and with the proxy thawed, so its
// connections close cleanly and statements left on the wire finish.
func ProxiedPool(t testing.TB, dbURL string, configure func(*pgxpool.Config)) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	proxied, proxy := Proxied(t, dbURL)
	cfg, err := pgxpool.ParseConfig(proxied)
	if err != nil {
		t.Fatalf("testkit: proxied pool: %v", err)
	}
	cfg.MaxConns = 4
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testkit: proxied pool: %v", err)
	}
	t.Cleanup(func() {
		proxy.Thaw()
		pool.Close()
	})
	return pool, proxy
}
