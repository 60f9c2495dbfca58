package gateway

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/problem"
)

// HeaderFencingToken carries the claim's fencing token upstream: strictly
// higher on every take-over (1 on the first claim with the PostgreSQL and
// memory stores, the server's clock with Redis), so an upstream can refuse
// a stale attempt.
const HeaderFencingToken = "Idempotency-Fencing-Token"

// HeaderTenant tells the upstream which tenant the gateway authenticated.
const HeaderTenant = "Idemgate-Tenant"

// TransportConfig tunes the upstream transport.
type TransportConfig struct {
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	IdleConnTimeout       time.Duration
	MaxIdleConnsPerHost   int
}

// NewTransport returns the transport shared by every proxied route.
func NewTransport(c TransportConfig) *http.Transport {
	d := &net.Dialer{Timeout: c.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil, // never route upstream calls through an environment proxy
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          c.MaxIdleConnsPerHost * 4,
		MaxIdleConnsPerHost:   c.MaxIdleConnsPerHost,
		IdleConnTimeout:       c.IdleConnTimeout,
		ResponseHeaderTimeout: c.ResponseHeaderTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// sentKey marks, per outgoing request, whether the request was written to
// the upstream: the line between "not processed" and "ambiguous".
type sentKey struct{}

// upstreamCall is the context of one proxied call: it answers sentKey with
// whether the request was written, which its client trace records. The
// route's timeout, the trace and the flag take one request copy together.
type upstreamCall struct {
	context.Context
	sent  atomic.Bool
	trace httptrace.ClientTrace
}

func (c *upstreamCall) Value(key any) any {
	if _, ok := key.(sentKey); ok {
		return &c.sent
	}
	return c.Context.Value(key)
}

func (c *upstreamCall) wroteHeaders() { c.sent.Store(true) }

// newProxy returns the reverse proxy of one upstream route. idem is the
// route's effective idempotency settings (Middleware.Config): which key
// the upstream receives.
func newProxy(target *url.URL, transport http.RoundTripper, timeout time.Duration, stripHeader string, idem idempotency.Config, problems problem.Writer) http.Handler {
	rp := &httputil.ReverseProxy{
		Transport:  leaseChecked{transport},
		BufferPool: copyBuffers,
		// ReverseProxy has already removed the hop-by-hop headers, and
		// every header the client named in Connection, from pr.Out when
		// Rewrite runs: what the upstream must receive is set here, so a
		// "Connection: Idempotency-Key" cannot take the key away.
		Rewrite: func(pr *httputil.ProxyRequest) {
			in, out := pr.In, pr.Out
			dropOwnedHeaders(out.Header, stripHeader)
			pr.SetURL(target)
			// The gateway's own headers share one backing array, each
			// value capped so that an Add cannot reach the next.
			vs := make([]string, 0, 6)
			set := func(name, value string) {
				vs = append(vs, value)
				out.Header[name] = vs[len(vs)-1 : len(vs) : len(vs)]
			}
			// What pr.SetXForwarded writes, in the shared array rather
			// than a slice each. dropOwnedHeaders removed any the client
			// sent, so there is no earlier X-Forwarded-For to extend.
			if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
				set("X-Forwarded-For", ip)
			}
			set("X-Forwarded-Host", in.Host)
			if in.TLS == nil {
				set("X-Forwarded-Proto", "http")
			} else {
				set("X-Forwarded-Proto", "https")
			}
			tenant := auth.Tenant(in.Context())
			if tenant != "" {
				set(HeaderTenant, tenant)
			}
			if key, ok := upstreamKey(in, tenant, idem); ok {
				set(idempotency.HeaderKey, key)
			}
			if a, ok := idempotency.AttemptFrom(in.Context()); ok {
				set(HeaderFencingToken, strconv.FormatInt(a.FencingToken, 10))
			}
		},
		ModifyResponse: func(res *http.Response) error {
			// The gateway alone says whether an answer is a replay; an
			// upstream's own marks would be stored and replayed as ours.
			dropReplayMarks(res.Header)
			dropReplayMarks(res.Trailer)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			sent, _ := r.Context().Value(sentKey{}).(*atomic.Bool)
			wasSent := sent != nil && sent.Load()
			a, _ := idempotency.AttemptFrom(r.Context())
			switch {
			case errors.Is(err, idempotency.ErrLeaseExpired):
				// Paused or cut off from the store past the lease: another
				// request may hold the key now. Nothing was sent.
				if a != nil {
					a.NotProcessed()
				}
				problems.Write(w, r, &problem.Error{Err: idempotency.ErrStoreUnavailable, RetryAfter: time.Second, Cause: err,
					Detail: "the claim on this Idempotency-Key expired before the request was sent upstream; it was not processed, retry with the same key"})
			case !wasSent || refusedHandshake(err):
				// Never reached the upstream, or the upstream refused the
				// TLS handshake (with TLS 1.3 the refusal of a client
				// certificate arrives after the request was written):
				// certainly not processed.
				if a != nil {
					a.NotProcessed()
				}
				problems.Write(w, r, &problem.Error{Err: ErrUpstreamUnavailable, Detail: "the upstream could not be reached; the request was not processed", Cause: err})
			default:
				// The upstream has the request; whether it acted is unknown.
				if a != nil {
					a.Ambiguous()
				}
				if isTimeout(err) {
					problems.Write(w, r, &problem.Error{Err: ErrUpstreamTimeout, Detail: "the upstream did not answer in time; retry with the same Idempotency-Key", Cause: err})
					return
				}
				problems.Write(w, r, &problem.Error{Err: ErrUpstreamUnavailable, Detail: "the connection to the upstream failed before it answered; retry with the same Idempotency-Key", Cause: err})
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		call := &upstreamCall{Context: ctx}
		call.trace.WroteHeaders = call.wroteHeaders
		rp.ServeHTTP(w, r.WithContext(httptrace.WithClientTrace(call, &call.trace)))
	})
}

// upstreamKey is the Idempotency-Key the upstream receives: the claim's
// key, in canonical form, as the route's forward_key says — by default
// after the tenant, so two tenants never share a key at an upstream. A
// request that runs without a claim (a method that needs no key, or the
// store down with fail_open) has the key it sent forwarded the same way,
// and none when it is not a valid key.
func upstreamKey(in *http.Request, tenant string, idem idempotency.Config) (string, bool) {
	if a, ok := idempotency.AttemptFrom(in.Context()); ok {
		return idem.ForwardKey.Key(a.Scope), true
	}
	maxLen := idem.MaxKeyLength
	if maxLen == 0 {
		maxLen = idempotency.DefaultMaxKeyLength
	}
	key, err := idempotency.ParseKey(in.Header.Values(idempotency.HeaderKey), idem.KeySyntax, maxLen)
	if err != nil {
		return "", false
	}
	if tenant == "" {
		tenant = idempotency.AnonymousTenant
	}
	return idem.ForwardKey.Key(idempotency.Scope{Tenant: tenant, Route: idem.Route, Key: key}), true
}

// dropOwnedHeaders removes from a request going upstream every header
// the gateway sets itself, in any spelling an upstream may read as it:
// many servers (CGI, WSGI, Rack, nginx's $http_ variables) read "_" as
// "-" and fold case, so an Idempotency_Fencing_Token or Idemgate_Tenant
// sent by a client would stand next to, or for, the gateway's own. Owned
// are the Idemgate-* headers, Idempotency-Key and
// Idempotency-Fencing-Token (set again after this), the credentials
// header the proxy strips (stripHeader, "" for none), and the forwarding
// headers SetXForwarded writes.
func dropOwnedHeaders(h http.Header, stripHeader string) {
	for name := range h {
		if !isASCII(name) {
			if readAsHasPrefix(name, "idemgate-") || sameReadAs(name, idempotency.HeaderKey) || sameReadAs(name, HeaderFencingToken) ||
				stripHeader != "" && sameReadAs(name, stripHeader) ||
				sameReadAs(name, "forwarded") || sameReadAs(name, "x-forwarded-for") || sameReadAs(name, "x-forwarded-host") || sameReadAs(name, "x-forwarded-proto") {
				delete(h, name)
			}
			continue
		}
		// The common case, without testing name for ASCII once per
		// owned name.
		switch {
		case len(name) >= len("idemgate-") && sameASCIIReadAs(name[:len("idemgate-")], "idemgate-"),
			sameASCIIReadAs(name, idempotency.HeaderKey), sameASCIIReadAs(name, HeaderFencingToken),
			stripHeader != "" && sameReadAs(name, stripHeader),
			sameASCIIReadAs(name, "forwarded"), sameASCIIReadAs(name, "x-forwarded-for"),
			sameASCIIReadAs(name, "x-forwarded-host"), sameASCIIReadAs(name, "x-forwarded-proto"):
			delete(h, name)
		}
	}
}

// dropReplayMarks removes Idempotent-Replayed, X-Idempotent-Replayed,
// Idempotent-Body-Omitted and Idempotency-Key-Expires, in any spelling,
// from an upstream's answer: the idempotency middleware sets them on the
// answers it gives, and only there.
func dropReplayMarks(h http.Header) {
	for name := range h {
		same := sameASCIIReadAs
		if !isASCII(name) {
			same = sameReadAs
		}
		if same(name, idempotency.HeaderReplayed) || same(name, idempotency.HeaderReplayedX) || same(name, idempotency.HeaderBodyOmitted) ||
			same(name, idempotency.HeaderKeyExpires) {
			delete(h, name)
		}
	}
}

// readAs is a header name as servers that fold "_" into "-" and ignore
// case read it.
func readAs(name string) string { return strings.ToLower(strings.ReplaceAll(name, "_", "-")) }

// sameReadAs reports whether readAs(a) == readAs(b) without building
// either: it runs for every header of every proxied request and response.
func sameReadAs(a, b string) bool {
	if !isASCII(a) || !isASCII(b) {
		return readAs(a) == readAs(b) // Unicode case folding can change lengths
	}
	return sameASCIIReadAs(a, b)
}

// sameASCIIReadAs is sameReadAs for a and b known to be ASCII.
func sameASCIIReadAs(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldReadAs(a[i]) != foldReadAs(b[i]) {
			return false
		}
	}
	return true
}

// readAsHasPrefix reports whether readAs(name) begins with prefix, which
// is in read-as form already.
func readAsHasPrefix(name, prefix string) bool {
	if !isASCII(name) {
		return strings.HasPrefix(readAs(name), prefix)
	}
	return len(name) >= len(prefix) && sameReadAs(name[:len(prefix)], prefix)
}

func foldReadAs(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case c >= 'A' && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// isASCII runs for every header name against every name the gateway
// owns, so it tests eight bytes at a time.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if binary.LittleEndian.Uint64([]byte(s[i:i+8]))&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// leaseChecked refuses to send a request whose idempotency lease has run
// out by this process's clock (idempotency.Attempt.Check): the last moment
// a paused or cut-off gateway can avoid going upstream beside the attempt
// that took its key over.
type leaseChecked struct{ next http.RoundTripper }

func (t leaseChecked) RoundTrip(req *http.Request) (*http.Response, error) {
	if a, ok := idempotency.AttemptFrom(req.Context()); ok {
		if err := a.Check(); err != nil {
			return nil, err
		}
	}
	return t.next.RoundTrip(req)
}

// copyBuffers lends the proxies their body copy buffers. Without a pool
// ReverseProxy allocates 32 KiB for every response, which is most of what
// a proxied request allocates and what sets the garbage collector's pace.
var copyBuffers = &bufferPool{}

type bufferPool struct{ p sync.Pool }

const copyBufferSize = 32 << 10

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, copyBufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) != copyBufferSize {
		return
	}
	buf = buf[:copyBufferSize]
	b.p.Put(&buf)
}

// refusedHandshake reports whether the upstream ended the connection with
// a TLS alert: it refused the handshake, so it never read the request.
func refusedHandshake(err error) bool {
	var alert tls.AlertError
	return errors.As(err, &alert)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
