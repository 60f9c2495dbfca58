package idempotency

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
)

// StoreErrorPolicy says what happens to a request when the store fails.
type StoreErrorPolicy string

const (
	// FailClosed refuses the request with 503 and Retry-After (default).
	FailClosed StoreErrorPolicy = "fail_closed"
	// FailOpen runs the request without idempotency protection.
	FailOpen StoreErrorPolicy = "fail_open"
)

// AmbiguousPolicy says what happens to a claim whose outcome is unknown:
// the upstream got the request but no answer came.
type AmbiguousPolicy string

const (
	// AmbiguousRelease lets the retry run again with the same key
	// forwarded, for upstreams that honour Idempotency-Key (default).
	AmbiguousRelease AmbiguousPolicy = "release"
	// AmbiguousHold keeps the record as unknown (409) until an operator
	// resolves it.
	AmbiguousHold AmbiguousPolicy = "hold"
)

// Config configures the middleware for one route. The zero value of every
// field but Route means its default.
type Config struct {
	// Route names the route in every scope; required.
	Route string
	// Methods that require a key. Default (nil) POST, PATCH; an empty,
	// non-nil list means none. Other methods pass through untouched.
	Methods []string
	// KeySyntax: KeyCompat (default) or KeyStrict.
	KeySyntax KeySyntax
	// MaxKeyLength after parsing. Default 255.
	MaxKeyLength int
	// Retention of a completed record. Default 24h.
	Retention time.Duration
	// Lease of a claim; renewed every Lease/3 while the handler runs.
	// Default 30s.
	Lease time.Duration
	// WaitInFlight > 0 holds a duplicate of a request in flight for up to
	// this long and replays the original's response instead of 409.
	// Default 0 (answer 409 at once).
	WaitInFlight time.Duration
	// MaxRequestBytes bounds the body read for the fingerprint. Default 1 MiB.
	MaxRequestBytes int64
	// MaxStoredResponseBytes bounds a stored body; a larger response is
	// delivered to the first caller and stored without its body. Default 1 MiB.
	MaxStoredResponseBytes int64
	// FingerprintHeaders are request headers included in the fingerprint.
	FingerprintHeaders []string
	// FingerprintJSONFields, when set, restrict a JSON body's fingerprint to
	// these JSON Pointers.
	FingerprintJSONFields []string
	// OnStoreError: FailClosed (default) or FailOpen.
	OnStoreError StoreErrorPolicy
	// OnAmbiguous: AmbiguousRelease (default) or AmbiguousHold.
	OnAmbiguous AmbiguousPolicy
	// ReplayCache, when set, answers replays of recently completed records
	// from process memory. Routes may share one.
	ReplayCache *ReplayCache

	// Tenant returns the tenant of a request. Default: "anonymous" for
	// every request, which is unsafe for multi-tenant use.
	Tenant func(*http.Request) string
	// ErrorHandler writes refusals. Default DefaultErrorHandler.
	ErrorHandler func(http.ResponseWriter, *http.Request, error)
	// Observe, when set, is called once per request that needs a key, with
	// the decision taken, and again with the stored outcome of an executed
	// request (Event.Stored set).
	Observe func(*http.Request, Event)
	// Logger receives store failures. Default slog.Default().
	Logger *slog.Logger
}

// AnonymousTenant is the tenant of every request when Config.Tenant is nil.
const AnonymousTenant = "anonymous"

func (c Config) withDefaults() Config {
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.KeySyntax == "" {
		c.KeySyntax = KeyCompat
	}
	if c.MaxKeyLength == 0 {
		c.MaxKeyLength = 255
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 1 << 20
	}
	if c.MaxStoredResponseBytes == 0 {
		c.MaxStoredResponseBytes = 1 << 20
	}
	if c.OnStoreError == "" {
		c.OnStoreError = FailClosed
	}
	if c.OnAmbiguous == "" {
		c.OnAmbiguous = AmbiguousRelease
	}
	if c.Tenant == nil {
		c.Tenant = func(*http.Request) string { return AnonymousTenant }
	}
	if c.ErrorHandler == nil {
		c.ErrorHandler = DefaultErrorHandler
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Methods = slices.Clone(c.Methods)
	for i, m := range c.Methods {
		c.Methods[i] = strings.ToUpper(m)
	}
	return c
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Route == "" {
		bad("route: required")
	}
	switch c.KeySyntax {
	case "", KeyStrict, KeyCompat:
	default:
		bad("key_syntax: %q is not strict or compat", c.KeySyntax)
	}
	if c.MaxKeyLength < 0 || c.MaxKeyLength > 4096 {
		bad("max_key_length: %d is outside 1..4096", c.MaxKeyLength)
	}
	if c.Retention < 0 {
		bad("retention: %s is negative", c.Retention)
	}
	if c.Lease < 0 || (c.Lease > 0 && c.Lease < 100*time.Millisecond) {
		bad("lease: %s must be at least 100ms", c.Lease)
	}
	if c.Retention > 0 && c.Lease > c.Retention {
		bad("lease: %s is longer than retention %s", c.Lease, c.Retention)
	}
	if c.WaitInFlight < 0 {
		bad("wait_in_flight: %s is negative", c.WaitInFlight)
	}
	if c.MaxRequestBytes < 0 {
		bad("max_request_bytes: %d is negative", c.MaxRequestBytes)
	}
	if c.MaxStoredResponseBytes < 0 {
		bad("max_stored_response_bytes: %d is negative", c.MaxStoredResponseBytes)
	}
	switch c.OnStoreError {
	case "", FailClosed, FailOpen:
	default:
		bad("on_store_error: %q is not fail_closed or fail_open", c.OnStoreError)
	}
	switch c.OnAmbiguous {
	case "", AmbiguousRelease, AmbiguousHold:
	default:
		bad("on_ambiguous: %q is not release or hold", c.OnAmbiguous)
	}
	for _, m := range c.Methods {
		if m == "" || strings.ContainsAny(m, " \t") {
			bad("methods: %q is not an HTTP method", m)
		}
	}
	if _, err := NewFingerprinter(c.FingerprintHeaders, c.FingerprintJSONFields); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
