package gateway

import "net/http"

// StartDraining begins the gateway's graceful shutdown, for good: it goes
// on serving every request, but /readyz answers 503 not-ready ("draining")
// so that a load balancer polling it takes the instance out of rotation,
// and every public response asks its client to close the connection, so
// that a proxy holding keep-alive connections to the gateway opens new
// ones elsewhere. An idle connection the gateway closes at the moment a
// proxy sends a request on it is what turns into a 502 at the proxy; the
// fewer idle connections are left when the listeners shut down, the fewer
// such races.
//
// A GET /v1/jobs/{id} waiting for its job (?wait=) answers at once with
// the current document, so that no wait holds the shutdown.
//
// Call it when the process is asked to stop, server.drain_delay before
// the listeners shut down. Calling it again does nothing.
func (g *Gateway) StartDraining() {
	g.draining.Store(true)
	g.drainOnce.Do(func() { close(g.drained) })
}

// Draining reports whether StartDraining was called.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// closeWhileDraining asks the client of each response given while the
// gateway drains to close the connection after it. Over HTTP/1.1 net/http
// closes the connection once the response is written; over HTTP/2 it sends
// GOAWAY and lets the streams in flight finish.
func (g *Gateway) closeWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.Draining() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}
