package gateway

import (
	"net/http"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// shedRetryAfter is the Retry-After of a shed request: long enough for the
// requests in hand to finish, short enough that a retrying client is not
// kept waiting once they have.
const shedRetryAfter = time.Second

// shedOverload bounds the requests the public listener handles at once to
// Options.MaxInFlight. A request beyond it is answered at once with 503
// not-ready and Retry-After, before anything else runs: it claims no
// idempotency key, so its retry runs as if it were the first request, and
// it costs no upstream connection, no store call and no access log line.
// What it does not cost is the point: every request in hand holds
// goroutines, buffers and file descriptors (its connection and one to the
// upstream), and past some number of them the process runs out of memory
// or descriptors and fails every request instead of the excess.
//
// /healthz and /readyz are neither counted nor shed: an orchestrator that
// saw them fail under load would restart or unroute a gateway that is
// working at its limit, which moves the load rather than shedding it.
//
// The limit is on requests, not connections: an idle keep-alive connection
// costs one descriptor and a few KiB and is closed by server.idle_timeout,
// a slow client by server.read_header_timeout and read_timeout.
func (g *Gateway) shedOverload(next http.Handler) http.Handler {
	limit := int64(g.opts.MaxInFlight)
	m := g.opts.Metrics
	// A shed request is not a failure of the gateway: its 503 is not
	// logged, which under overload would add a line per refusal.
	quiet := g.problems
	quiet.Logger = nil
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		n := g.inFlight.Add(1)
		defer g.inFlight.Add(-1)
		if limit > 0 && n > limit {
			m.shed.Inc()
			quiet.Write(w, r, &problem.Error{Err: ErrNotReady, Detail: "overloaded: the gateway is handling as many requests as it may at once (server.max_in_flight); retry after the delay in Retry-After", RetryAfter: shedRetryAfter})
			return
		}
		m.inFlight.Inc()
		defer m.inFlight.Dec()
		next.ServeHTTP(w, r)
	})
}
