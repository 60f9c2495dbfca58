package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrRetriesExhausted is wrapped, together with the last answer's error
// (a *ProblemError or a network error), by the error of a call that ran
// out of attempts or of MaxElapsed while the answers were still
// retryable.
var ErrRetriesExhausted = errors.New("idemgate: retries exhausted")

// Response is the outcome of one logical call: its last attempt's answer.
type Response struct {
	// Status, Header and Body are the last answer's; Status is 0 when the
	// last attempt got no answer (a network error).
	Status int
	Header http.Header
	Body   []byte
	// Replayed is true when the gateway answered from its store
	// (Idempotent-Replayed: true): an earlier attempt, or an earlier call
	// with the same key, already ran.
	Replayed bool
	// Key is the Idempotency-Key every attempt carried ("" for a safe
	// method). Keep it to retry the call later, with WithKey.
	Key string
	// Attempts counts the requests sent, the first included.
	Attempts int
}

// Do makes one logical call: method on path (relative to the base URL,
// with its query) with body, retried until an answer is final.
//
// Every attempt carries the same Idempotency-Key (a fresh UUIDv7, or the
// one given with WithKey; none for GET and HEAD) and the same body bytes.
// body is sent as is when it is a []byte or json.RawMessage, read once
// when it is an io.Reader (and closed if it is an io.Closer), JSON-encoded
// once otherwise; nil sends no body. Content-Type is application/json
// unless WithHeader sets it.
//
// Retried, with exponential backoff and full jitter, no sooner than a
// Retry-After says: a network error or timeout (not a refused TLS
// certificate), and a problem whose retryable member is true — or, in a
// document without one, 408, 409 idempotency-key-in-use, 425, 429, 502,
// 503 and 504. A replayed answer is never retried: it is stored and would
// come back the same. Any other answer is final: a 3xx with a Location
// returns the Response and a *RedirectError (redirects are never
// followed, so the key, the body and the credentials go nowhere but the
// base URL); another 1xx–3xx returns the Response and a nil error; a 4xx
// or 5xx returns the Response and a *ProblemError.
//
// When the attempts or MaxElapsed run out on a retryable answer, Do
// returns the last Response and an error wrapping both
// ErrRetriesExhausted and the last answer's error. When ctx ends, Do
// returns at once with an error wrapping ctx.Err() and the last answer's
// error, if any. The Response is nil only when the call could not be
// built (a body that does not encode, an invalid key); otherwise it is
// returned with every error, so Key and Attempts are always at hand.
func (c *Client) Do(ctx context.Context, method, path string, body any, opts ...CallOption) (*Response, error) {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	payload, hasBody, err := encodeBody(body)
	if err != nil {
		return nil, fmt.Errorf("idemgate: %s %s: encoding the body: %w", method, path, err)
	}
	key := o.key
	if key == "" && !isSafe(method) {
		if key, err = c.newKey(); err != nil {
			return nil, fmt.Errorf("idemgate: generating an idempotency key: %w", err)
		}
	}
	header := http.Header{}
	header.Set("User-Agent", "idemgate-go")
	if c.apiKey != "" {
		header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if hasBody {
		header.Set("Content-Type", "application/json")
	}
	for name, vs := range o.header {
		header[name] = append([]string(nil), vs...)
	}
	header.Del("Idempotency-Key")
	if key != "" {
		hk, err := headerKey(key)
		if err != nil {
			return nil, fmt.Errorf("%w: %q", err, key)
		}
		header.Set("Idempotency-Key", hk)
	}
	a := attempt{method: method, url: c.url(path), header: header, body: payload, hasBody: hasBody}
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("idemgate: %s %s: %w", method, path, err)
	}
	resp := &Response{Key: key}
	start := c.now()
	var cause error
	for {
		if ctx.Err() != nil {
			return resp, stopped(ctx, method, path, cause)
		}
		resp.Attempts++
		var retryAfter time.Duration
		res, err := c.send(ctx, a)
		if err != nil {
			if ctx.Err() != nil {
				return resp, stopped(ctx, method, path, cause)
			}
			resp.Status, resp.Header, resp.Body, resp.Replayed = 0, nil, nil, false
			cause = fmt.Errorf("idemgate: %s %s: %w", method, path, err)
			if !retryableNetwork(err) {
				return resp, cause
			}
		} else {
			resp.Status, resp.Header, resp.Body = res.status, res.header, res.body
			resp.Replayed = res.header.Get("Idempotent-Replayed") == "true"
			if isRedirect(res.status, res.header) {
				return resp, &RedirectError{Status: res.status, Location: res.header.Get("Location")}
			}
			if res.status < 400 {
				return resp, nil
			}
			p := problemFrom(res.status, res.header, res.body)
			if !p.Retryable || resp.Replayed {
				return resp, p
			}
			cause = p
			retryAfter = parseRetryAfter(res.header.Get("Retry-After"), c.now())
		}
		if resp.Attempts >= c.retry.MaxAttempts {
			return resp, exhausted(resp.Attempts, cause)
		}
		wait := max(retryAfter, c.backoff(resp.Attempts))
		if c.now().Add(wait).Sub(start) > c.retry.MaxElapsed {
			return resp, exhausted(resp.Attempts, cause)
		}
		if err := c.sleep(ctx, wait); err != nil {
			return resp, stopped(ctx, method, path, cause)
		}
	}
}

func exhausted(attempts int, cause error) error {
	return fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, attempts, cause)
}

func stopped(ctx context.Context, method, path string, cause error) error {
	if cause == nil {
		return fmt.Errorf("idemgate: %s %s: %w", method, path, ctx.Err())
	}
	return fmt.Errorf("idemgate: %s %s: %w; last answer: %w", method, path, ctx.Err(), cause)
}

// retryableNetwork reports whether a failed attempt may succeed when
// sent again: anything but a certificate the client refuses.
func retryableNetwork(err error) bool {
	var cv *tls.CertificateVerificationError
	return !errors.As(err, &cv)
}

// backoff is the random wait before retry n (n ≥ 1), with full jitter:
// uniform in [0, ceiling(n)].
func (c *Client) backoff(n int) time.Duration {
	return time.Duration(c.randN(int64(c.ceiling(n)) + 1))
}

// ceiling is min(MaxBackoff, MinBackoff·2^(n-1)), below math.MaxInt64.
func (c *Client) ceiling(n int) time.Duration {
	d := c.retry.MinBackoff
	for i := 1; i < n && d < c.retry.MaxBackoff; i++ {
		if d > math.MaxInt64/2 {
			d = c.retry.MaxBackoff
			break
		}
		d *= 2
	}
	return min(d, c.retry.MaxBackoff, math.MaxInt64-1)
}

// parseRetryAfter reads delay-seconds or an HTTP-date; 0 when absent or
// malformed.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		// A day is past any MaxElapsed worth having; capping it keeps
		// the multiplication from overflowing.
		return time.Duration(min(secs, uint64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

func isSafe(method string) bool {
	switch strings.ToUpper(method) {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

func (c *Client) url(path string) string {
	if path != "" && path[0] != '/' {
		path = "/" + path
	}
	return c.base + path
}

// encodeBody turns body into the bytes every attempt sends.
func encodeBody(body any) ([]byte, bool, error) {
	switch b := body.(type) {
	case nil:
		return nil, false, nil
	case []byte:
		return b, true, nil
	case json.RawMessage:
		return b, true, nil
	case io.Reader:
		if rc, ok := b.(io.Closer); ok {
			defer rc.Close()
		}
		data, err := io.ReadAll(b)
		return data, true, err
	default:
		data, err := json.Marshal(body)
		return data, true, err
	}
}

// attempt is what every attempt of a call sends.
type attempt struct {
	method, url string
	header      http.Header
	body        []byte
	hasBody     bool
}

// check refuses, before anything is sent, a call no attempt could make.
func (a attempt) check() error {
	u, err := url.Parse(a.url)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL %q: the scheme must be http or https", a.url)
	}
	_, err = http.NewRequest(a.method, a.url, nil)
	return err
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// send makes one attempt and reads its whole answer; an error is a
// network error (no answer, or an answer cut short).
func (c *Client) send(ctx context.Context, a attempt) (answer, error) {
	var body io.Reader = http.NoBody
	if a.hasBody {
		body = bytes.NewReader(a.body)
	}
	req, err := http.NewRequestWithContext(ctx, a.method, a.url, body)
	if err != nil {
		return answer{}, err
	}
	req.Header = a.header.Clone()
	res, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer to %s: %w", a.method, err)
	}
	return answer{status: res.StatusCode, header: res.Header, body: data}, nil
}
