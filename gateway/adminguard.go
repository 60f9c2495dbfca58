package gateway

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/problem"
)

// DefaultAdminMaxAuthFailures is how many wrong admin tokens one peer may
// send within AdminAuthWindow before it is refused for AdminAuthWindow.
const DefaultAdminMaxAuthFailures = 10

// AdminAuthWindow is the window in which an admin listener counts a
// peer's wrong tokens, and how long it then refuses that peer.
const AdminAuthWindow = time.Minute

const (
	// adminGuardPeers bounds the table of peers. A flood from more
	// addresses than that shares one entry (overflowPeer).
	adminGuardPeers = 4096
	// adminGuardLogEvery is the least time between two warnings, so that
	// a flood of wrong tokens cannot flood the log; a warning counts the
	// wrong tokens left unlogged since the last.
	adminGuardLogEvery = time.Second
)

// overflowPeer is the entry of the peers the table has no room for and
// of those without an IP address.
var overflowPeer = netip.Prefix{}

// AdminGuard slows the guessing of an admin token. It counts the refused
// requests of an admin listener in idemgate_admin_auth_failures_total and
// logs the wrong tokens, at most one line a second, naming the peer. A
// peer (its IP address; an IPv6 address by its /64, which one client
// usually holds whole) that sends MaxFailures wrong tokens within
// AdminAuthWindow is answered 429 rate-limited, with Retry-After, for the
// next AdminAuthWindow, and its token is not even compared: a right token
// is refused too until the delay is over, since an answer that told a
// right token apart would let the guessing go on at full speed. A request
// without an Authorization header is refused 401 and counted, but is no
// guess and does not count towards the throttle (a browser's first
// request to the console carries none). The zero value is not usable;
// call NewAdminGuard.
type AdminGuard struct {
	maxFailures int // -1: no throttle
	maxPeers    int
	now         func() time.Time
	logger      *slog.Logger
	failures    *prometheus.CounterVec

	mu       sync.Mutex
	peers    map[netip.Prefix]*peerFailures
	swept    time.Time // the last sweep of idle peers
	logged   time.Time // the last warning
	unlogged int       // wrong tokens not logged since
}

// peerFailures is one peer's wrong tokens.
type peerFailures struct {
	since   time.Time // the start of the window counted
	count   int       // wrong tokens since then
	refused time.Time // refused without comparing until then
}

// newAdminAuthFailures is the series of every admin listener's refusals.
func newAdminAuthFailures() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemgate_admin_auth_failures_total",
		Help: "Requests an admin listener refused, by reason: missing (no Authorization header), wrong (a token that is not the admin token) or throttled (429: the peer sent admin.max_auth_failures wrong tokens within a minute; not compared).",
	}, []string{"reason"})
}

// NewAdminGuard returns the guard of an admin listener outside the gateway
// (the worker's), its series registered on reg. maxFailures 0 is
// DefaultAdminMaxAuthFailures; -1 counts and logs but never throttles.
func NewAdminGuard(maxFailures int, reg prometheus.Registerer, logger *slog.Logger) *AdminGuard {
	failures := newAdminAuthFailures()
	reg.MustRegister(failures)
	return newAdminGuard(maxFailures, failures, logger)
}

func newAdminGuard(maxFailures int, failures *prometheus.CounterVec, logger *slog.Logger) *AdminGuard {
	if maxFailures == 0 {
		maxFailures = DefaultAdminMaxAuthFailures
	}
	if logger == nil {
		logger = slog.Default()
	}
	for _, reason := range []string{"missing", "wrong", "throttled"} {
		failures.WithLabelValues(reason) // exported at 0 from the start
	}
	return &AdminGuard{maxFailures: maxFailures, maxPeers: adminGuardPeers, now: time.Now, logger: logger,
		failures: failures, peers: make(map[netip.Prefix]*peerFailures)}
}

// peerOf is the entry r's peer is counted under: its address, an IPv6
// one by its /64.
func peerOf(r *http.Request) (netip.Prefix, string) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return overflowPeer, host
	}
	addr = addr.Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p, addr.String()
}

// throttled reports how long r's peer is still refused without its token
// being compared; 0: compare it.
func (g *AdminGuard) throttled(r *http.Request) time.Duration {
	if g == nil || g.maxFailures < 0 {
		return 0
	}
	p, _ := peerOf(r)
	g.mu.Lock()
	defer g.mu.Unlock()
	pf := g.peers[p]
	if pf == nil && len(g.peers) >= g.maxPeers {
		pf = g.peers[overflowPeer] // where a peer beyond the table is counted
	}
	if pf == nil {
		return 0
	}
	if d := pf.refused.Sub(g.now()); d > 0 {
		g.failures.WithLabelValues("throttled").Inc()
		return d
	}
	return 0
}

// refused counts r's refusal: a wrong token towards its peer's throttle.
func (g *AdminGuard) refused(r *http.Request) {
	if g == nil {
		return
	}
	if len(r.Header.Values("Authorization")) == 0 {
		g.failures.WithLabelValues("missing").Inc()
		return
	}
	g.failures.WithLabelValues("wrong").Inc()
	p, addr := peerOf(r)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	pf := g.peer(p, now)
	if now.Sub(pf.since) >= AdminAuthWindow {
		pf.since, pf.count = now, 0
	}
	pf.count++
	count := pf.count
	throttle := g.maxFailures > 0 && count >= g.maxFailures
	if throttle {
		pf.refused = now.Add(AdminAuthWindow)
		pf.since, pf.count = pf.refused, 0
	}
	if now.Sub(g.logged) < adminGuardLogEvery {
		g.unlogged++
		return
	}
	args := []any{"peer", addr, "path", r.URL.Path, "failures", count, "unlogged", g.unlogged}
	g.logged, g.unlogged = now, 0
	if throttle {
		g.logger.WarnContext(r.Context(), "wrong admin tokens: peer refused for "+AdminAuthWindow.String(), args...)
		return
	}
	g.logger.WarnContext(r.Context(), "wrong admin token", args...)
}

// peer returns p's entry, made when p has none. When the table is full it
// first drops the peers idle for a window (at most once a second, so a
// flood of new addresses does not sweep on every request); when it is
// still full p shares overflowPeer's entry. Callers hold mu.
func (g *AdminGuard) peer(p netip.Prefix, now time.Time) *peerFailures {
	if pf := g.peers[p]; pf != nil {
		return pf
	}
	if len(g.peers) >= g.maxPeers && now.Sub(g.swept) >= time.Second {
		g.swept = now
		for q, pf := range g.peers {
			if now.Sub(pf.since) >= AdminAuthWindow && !pf.refused.After(now) {
				delete(g.peers, q)
			}
		}
	}
	if len(g.peers) >= g.maxPeers {
		p = overflowPeer
		if pf := g.peers[p]; pf != nil {
			return pf
		}
	}
	pf := &peerFailures{since: now}
	g.peers[p] = pf
	return pf
}

// tooManyFailures is the refusal of a throttled peer, retry after d.
func tooManyFailures(d time.Duration) error {
	return &problem.Error{Err: ratelimit.ErrLimited, RetryAfter: d,
		Detail: "too many wrong admin tokens from this address; retry after the delay in Retry-After"}
}
