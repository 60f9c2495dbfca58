package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// HeaderFencingToken carries the claim's fencing token upstream: 1 on the
// first claim, higher on every take-over, so an upstream can refuse a
// stale attempt.
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

// newProxy returns the reverse proxy of one upstream route.
func newProxy(target *url.URL, transport http.RoundTripper, timeout time.Duration, stripHeader string, problems problemWriter) http.Handler {
	rp := &httputil.ReverseProxy{
		Transport:  leaseChecked{transport},
		BufferPool: copyBuffers,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			out := pr.Out
			if stripHeader != "" {
				out.Header.Del(stripHeader) // the tenant's credentials stay here
			}
			out.Header.Del(HeaderTenant)
			out.Header.Del(HeaderFencingToken)
			if t := auth.Tenant(pr.In.Context()); t != "" {
				out.Header.Set(HeaderTenant, t)
			}
			if a, ok := idempotency.AttemptFrom(pr.In.Context()); ok {
				out.Header.Set(HeaderFencingToken, strconv.FormatInt(a.FencingToken, 10))
			}
			var sent atomic.Bool
			trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
			ctx := context.WithValue(out.Context(), sentKey{}, &sent)
			*out = *out.WithContext(httptrace.WithClientTrace(ctx, trace))
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
				problems.write(w, r, &idempotency.RequestError{Err: idempotency.ErrStoreUnavailable, RetryAfter: time.Second, Cause: err,
					Detail: "the claim on this Idempotency-Key expired before the request was sent upstream; it was not processed, retry with the same key"})
			case !wasSent:
				// Never reached the upstream: certainly not processed.
				if a != nil {
					a.NotProcessed()
				}
				problems.write(w, r, &Problem{Err: ErrUpstreamUnavailable, Detail: "the upstream could not be reached; the request was not processed", Cause: err})
			default:
				// The upstream has the request; whether it acted is unknown.
				if a != nil {
					a.Ambiguous()
				}
				if isTimeout(err) {
					problems.write(w, r, &Problem{Err: ErrUpstreamTimeout, Detail: "the upstream did not answer in time; retry with the same Idempotency-Key", Cause: err})
					return
				}
				problems.write(w, r, &Problem{Err: ErrUpstreamUnavailable, Detail: "the connection to the upstream failed before it answered; retry with the same Idempotency-Key", Cause: err})
			}
		},
	}
	if timeout <= 0 {
		return rp
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
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

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
