package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/idemgate/idemgate/gateway"
)

// benchTransport is the upstream transport both sides use: the settings
// idemgate's defaults give gateway.NewTransport, with the longer response
// header timeout the bench configuration sets (a held request in the
// in-flight scenario must not time out).
func benchTransport() http.RoundTripper {
	return gateway.NewTransport(gateway.TransportConfig{
		DialTimeout:           5 * time.Second,
		ResponseHeaderTimeout: 120 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   256,
	})
}

// newBaseline is the plain proxy idemgate is compared with: an
// httputil.ReverseProxy with the same transport and the same forwarding
// headers (X-Forwarded-*), nothing else.
func newBaseline(target *url.URL) http.Handler {
	return &httputil.ReverseProxy{
		Transport: benchTransport(),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
	}
}

// newServer has the timeouts of idemgate's default server configuration.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      120 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 16,
	}
}

// runProxy is `idembench proxy`: the baseline as a process of its own, so
// it can be pinned to the same CPU as idemgate.
func runProxy(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address to listen on")
	up := fs.String("upstream", "", "upstream base URL (loopback)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, err := url.Parse(*up)
	if err != nil || target.Host == "" {
		return fmt.Errorf("proxy: -upstream %q is not a URL", *up)
	}
	if err := requireLoopback(target.Hostname()); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := newServer(newBaseline(target))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "proxy: listening on http://%s -> %s\n", ln.Addr(), target)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// requireLoopback refuses any host that is not on this machine's loopback:
// the harness sends load nowhere else.
func requireLoopback(host string) error {
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address: idembench only loads 127.0.0.0/8 and ::1", host)
	}
	return nil
}
