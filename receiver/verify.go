package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// DefaultTolerance is how far a webhook-timestamp may be from the
// receiver's clock when Verifier.Tolerance is zero.
const DefaultTolerance = 5 * time.Minute

// secretPrefix marks a Standard Webhooks secret; the rest is base64.
const secretPrefix = "whsec_"

// Verification errors. Every error Verify returns matches exactly one.
var (
	// ErrMissingHeaders: webhook-id, webhook-timestamp or
	// webhook-signature is absent or empty.
	ErrMissingHeaders = errors.New("receiver: missing webhook headers")
	// ErrTimestamp: webhook-timestamp is not Unix seconds or is outside the
	// tolerance, which bounds how long a captured request can be replayed.
	ErrTimestamp = errors.New("receiver: webhook timestamp invalid or outside tolerance")
	// ErrSignature: no signature matches any secret.
	ErrSignature = errors.New("receiver: no matching webhook signature")
)

// Verifier checks Standard Webhooks signatures. Its fields may be set after
// NewVerifier and before first use; it is then safe for concurrent use.
type Verifier struct {
	// Tolerance is the largest accepted distance between webhook-timestamp
	// and Now, in either direction. Zero means DefaultTolerance.
	Tolerance time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time

	keys [][]byte
}

// NewVerifier returns a Verifier that accepts a signature made with any of
// secrets ("whsec_" + base64). Pass the old and the new secret while a
// secret rotates.
func NewVerifier(secrets ...string) (*Verifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("receiver: no webhook secret")
	}
	v := &Verifier{}
	var errs []error
	for i, s := range secrets {
		key, err := decodeSecret(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("receiver: secret %d: %w", i+1, err))
			continue
		}
		v.keys = append(v.keys, key)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return v, nil
}

func decodeSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("does not start with %q", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("not base64 after %q: %w", secretPrefix, err)
	}
	if len(key) == 0 {
		return nil, errors.New("empty key")
	}
	return key, nil
}

// Verify checks that body, with the webhook headers in h, was signed with
// one of the Verifier's secrets within the tolerance. It returns an error
// matching ErrMissingHeaders, ErrTimestamp or ErrSignature.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id := h.Get(HeaderWebhookID)
	ts := h.Get(HeaderWebhookTimestamp)
	sigs := h.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrTimestamp, ts)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tolerance := v.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if !within(sec, now().Unix(), int64(tolerance/time.Second)) {
		return fmt.Errorf("%w: %d is more than %s from now", ErrTimestamp, sec, tolerance)
	}

	var want [][]byte
	for _, key := range v.keys {
		want = append(want, sign(key, id, ts, body))
	}
	for _, sig := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue // another scheme, e.g. asymmetric v1a: not ours to judge
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, w := range want {
			if hmac.Equal(got, w) {
				return nil
			}
		}
	}
	return ErrSignature
}

// within reports whether sec is at most tol seconds from now. It compares
// in seconds, as a timestamp far in the past or future would overflow a
// time.Duration, and checks the range before it subtracts: now - sec wraps
// for a sec near either end of int64 (now + MinInt64 would pass as 0).
func within(sec, now, tol int64) bool {
	if sec < now {
		return now-sec >= 0 && now-sec <= tol
	}
	return sec-now >= 0 && sec-now <= tol
}

// sign is the Standard Webhooks v1 signature: HMAC-SHA256 of
// "{id}.{timestamp}.{body}".
func sign(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
