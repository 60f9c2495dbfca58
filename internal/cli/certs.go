package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/tlsfiles"
)

// certs are the certificates a process serves (tls, admin_tls,
// worker.admin_tls) and presents to upstreams (routes[].upstream_tls):
// each is re-read when its files change, and all of them on SIGHUP. The
// parts of one process share them, as they share services.
type certs struct {
	mu    sync.Mutex
	pairs []*tlsfiles.Pair
}

// load reads a pair; it fails when the files cannot be used, so a process
// never starts without its certificate.
func (c *certs) load(certFile, keyFile string, logger *slog.Logger) (*tlsfiles.Pair, error) {
	p, err := tlsfiles.Load(certFile, keyFile, tlsfiles.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.pairs = append(c.pairs, p)
	c.mu.Unlock()
	return p, nil
}

// serverConfig is the TLS configuration of a listener serving f, or nil
// for plain HTTP.
func (c *certs) serverConfig(f *config.TLSFiles, logger *slog.Logger) (*tls.Config, error) {
	if f == nil {
		return nil, nil
	}
	p, err := c.load(f.CertFile, f.KeyFile, logger)
	if err != nil {
		return nil, err
	}
	return tlsfiles.ServerConfig(p), nil
}

// upstreamTransport is base with u's TLS settings: its own connection
// pool, since connections made with one client certificate must not carry
// another route's requests.
func (c *certs) upstreamTransport(base *http.Transport, u *config.UpstreamTLS, logger *slog.Logger) (*http.Transport, error) {
	var roots *x509.CertPool
	if u.CAFile != "" {
		var err error
		if roots, err = tlsfiles.LoadCAs(u.CAFile); err != nil {
			return nil, err
		}
	}
	var pair *tlsfiles.Pair
	if u.CertFile != "" {
		var err error
		if pair, err = c.load(u.CertFile, u.KeyFile, logger); err != nil {
			return nil, err
		}
	}
	t := base.Clone()
	t.TLSClientConfig = tlsfiles.ClientConfig(roots, u.ServerName, pair)
	return t, nil
}

// reload re-reads every certificate, changed or not; one that cannot be
// read is logged and its previous version stays in use.
func (c *certs) reload(logger *slog.Logger) {
	c.mu.Lock()
	pairs := append([]*tlsfiles.Pair(nil), c.pairs...)
	c.mu.Unlock()
	failed := 0
	for _, p := range pairs {
		if p.Reload() != nil {
			failed++
		}
	}
	logger.Info("SIGHUP: certificates re-read", "certificates", len(pairs), "failed", failed)
}

// reloadOnHangup re-reads the certificates on every SIGHUP until ctx
// ends. SIGHUP is caught from the start, so a process that says it is
// listening is never killed by one.
func (c *certs) reloadOnHangup(logger *slog.Logger) (run func(context.Context) error) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return func(ctx context.Context) error {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				c.reload(logger)
			}
		}
	}
}
