package client

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Client calls an idemgate gateway. It is safe for concurrent use; build it
// once with New and share it.
type Client struct {
	base   string
	apiKey string
	hc     *http.Client
	retry  Retry

	// Injected so tests control time and jitter.
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	randN  func(n int64) int64 // uniform in [0, n)
	newKey func() (string, error)
}

// Retry bounds the retrying of one logical call. A zero field takes its
// default; so does a negative one.
type Retry struct {
	// MaxAttempts is the number of attempts of one call, the first
	// included. Default 8; 1 sends once and never retries.
	MaxAttempts int
	// MinBackoff is the ceiling of the first retry's random wait; each
	// retry doubles the ceiling (full jitter: the wait is uniform in
	// [0, ceiling]). Default 100ms.
	MinBackoff time.Duration
	// MaxBackoff caps the ceiling. A Retry-After from the gateway is
	// honoured even when it is longer. Default 10s; raised to MinBackoff
	// when lower.
	MaxBackoff time.Duration
	// MaxElapsed bounds the call: no attempt starts later than MaxElapsed
	// after the call began. A wait (a backoff or a Retry-After) that would
	// end past it ends the retrying with the last answer. Default 1m.
	MaxElapsed time.Duration
}

// Defaults of Retry.
const (
	DefaultMaxAttempts = 8
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 10 * time.Second
	DefaultMaxElapsed  = time.Minute
)

func (r Retry) withDefaults() Retry {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.MinBackoff <= 0 {
		r.MinBackoff = DefaultMinBackoff
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = DefaultMaxBackoff
	}
	r.MaxBackoff = max(r.MaxBackoff, r.MinBackoff)
	if r.MaxElapsed <= 0 {
		r.MaxElapsed = DefaultMaxElapsed
	}
	return r
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends Authorization: Bearer key on every request (the
// gateway's auth mode api_key). WithHeader on a call overrides it.
func WithAPIKey(key string) Option {
	return func(c *Client) { c.apiKey = key }
}

// WithHTTPClient sends the attempts through hc. The default is an
// http.Client with http.DefaultTransport and a one-minute timeout per
// attempt; a timed-out attempt is retried with the same key. Whatever
// hc's CheckRedirect says, redirects are not followed (see RedirectError):
// the client uses a copy of hc that returns them.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = withoutRedirects(hc)
		}
	}
}

// WithRetry sets the retry bounds; zero fields keep their defaults.
func WithRetry(r Retry) Option {
	return func(c *Client) { c.retry = r.withDefaults() }
}

// New returns a Client for the gateway at baseURL (scheme, host and an
// optional path prefix, for example "https://api.example.com").
func New(baseURL string, opts ...Option) *Client {
	c := &Client{
		base:  strings.TrimRight(baseURL, "/"),
		hc:    &http.Client{Timeout: time.Minute, CheckRedirect: noRedirects},
		retry: Retry{}.withDefaults(),
		now:   time.Now,
		sleep: sleepContext,
		randN: rand.Int64N,
		newKey: func() (string, error) {
			id, err := uuid.NewV7()
			return id.String(), err
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CallOption configures one call.
type CallOption func(*callOptions)

type callOptions struct {
	key    string
	header http.Header
}

// WithKey makes the call use key as its Idempotency-Key instead of a
// generated one: a business key the caller already has (an order id, an
// event id), so that a call repeated after a crash or a restart is the
// same request to the gateway. The key is sent verbatim when it is a bare
// token (printable ASCII without spaces, commas or quotes), else as an
// RFC 8941 quoted string; the gateway reads both as the same key. On a
// safe method (GET, HEAD, OPTIONS, TRACE) the key is sent only when given
// this way.
func WithKey(key string) CallOption {
	return func(o *callOptions) { o.key = key }
}

// WithHeader adds a header to every attempt of the call (Content-Type, a
// per-call Authorization, a trace header). Idempotency-Key is set by the
// call itself; use WithKey.
func WithHeader(name, value string) CallOption {
	return func(o *callOptions) {
		if o.header == nil {
			o.header = http.Header{}
		}
		o.header.Add(name, value)
	}
}
