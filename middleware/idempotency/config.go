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

// ForwardKeyPolicy says which Idempotency-Key a handler that forwards the
// request (the gateway's proxy) sends upstream. Whatever the policy, it is
// the key in its canonical form (ParseKey's result: unquoted), never the
// header as the client wrote it, so "abc" and abc reach the upstream as
// one key.
type ForwardKeyPolicy string

const (
	// ForwardTenantScoped forwards "{tenant}:{key}" (default). An upstream
	// that scopes keys to its account — the gateway — then never sees two
	// tenants' requests under one key.
	ForwardTenantScoped ForwardKeyPolicy = "tenant_scoped"
	// ForwardAsSent forwards the key alone, for an upstream that scopes
	// keys by the tenant it is told (Idemgate-Tenant) itself.
	ForwardAsSent ForwardKeyPolicy = "as_sent"
)

// Key returns the Idempotency-Key to forward upstream for the key of s,
// s.Key in canonical form. The zero policy is ForwardTenantScoped.
func (p ForwardKeyPolicy) Key(s Scope) string {
	if p == ForwardAsSent {
		return s.Key
	}
	return s.Tenant + ":" + s.Key
}

// Config configures the middleware for one route. The zero value of every
// field but Route means its default. The yaml tags name the settings as a
// configuration file writes them (idemgate's idempotency blocks decode
// into a Config); the fields without one are set in code.
type Config struct {
	// Route names the route in every scope; required.
	Route string `yaml:"-"`
	// Methods that require a key, each an HTTP method token. Default (nil)
	// DefaultMethods, POST and PATCH; an empty, non-nil list means none.
	// Other standard methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE,
	// CONNECT) pass through untouched; a method that is not one of the
	// standard ones (RFC 9110 methods are case-sensitive, so "post" is
	// not POST) needs a key too unless Methods is an empty, non-nil list.
	Methods []string `yaml:"methods"`
	// KeySyntax: KeyCompat or KeyStrict. Default DefaultKeySyntax, compat.
	KeySyntax KeySyntax `yaml:"key_syntax"`
	// MaxKeyLength after parsing, 1..4096. Default DefaultMaxKeyLength, 255.
	MaxKeyLength int `yaml:"max_key_length"`
	// Retention of a completed record. Default DefaultRetention, 24h.
	Retention time.Duration `yaml:"retention"`
	// Lease of a claim, at least 100ms and at most Retention; renewed
	// every Lease/3 while the handler runs. Default DefaultLease, 30s.
	Lease time.Duration `yaml:"lease"`
	// StoreTimeout bounds each store call that only reads (the record a
	// taken-over attempt answers from, a duplicate's wait); the writes
	// that commit have CommitTimeout. A store that does not answer in time
	// costs a 503 with Retry-After instead of a wait as long as the
	// network's. Keep it well below Lease. Default DefaultStoreTimeout, 2s.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// CommitTimeout bounds each store write that commits: a claim, a
	// renewal, storing an outcome (completion, release, hold). A claim
	// that cannot be made in time is answered 503 with Retry-After; an
	// outcome that cannot be stored in time is retried in the background
	// (see Middleware.Drain). It is apart from StoreTimeout because a commit
	// may wait for more than the store: PostgreSQL with a synchronous
	// standby (synchronous_standby_names) answers a commit only once the
	// standby has it, and a standby a few hundred milliseconds behind
	// under load would turn healthy requests into 503s under a read's
	// deadline. A write whose deadline passes while it may have committed
	// is resolved by the store when it can (pgstore reads its row back),
	// not guessed. Keep it below Lease/3, the renewal period, so a renewal
	// that waits the whole deadline still lands within the lease. Default
	// DefaultCommitTimeout, 10s.
	CommitTimeout time.Duration `yaml:"commit_timeout"`
	// WaitInFlight > 0 holds a duplicate of a request in flight for up to
	// this long and replays the original's response instead of 409.
	// Default 0 (answer 409 at once).
	WaitInFlight time.Duration `yaml:"wait_in_flight"`
	// MaxRequestBytes bounds the body read for the fingerprint. Default
	// DefaultMaxRequestBytes, 1 MiB.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// DecodeContentEncodings are the content codings (ContentEncodingGzip,
	// ContentEncodingDeflate) of a request body the middleware decodes:
	// MaxRequestBytes bounds the decoded size, the fingerprint covers the
	// decoded body, and the handler receives it decoded, without
	// Content-Encoding. Default none: a body in any coding but identity
	// is refused with 415 and Accept-Encoding, since a limit or a
	// fingerprint of the encoded bytes would let 8 KB inflate to 8 MiB
	// and give one document as many fingerprints as it has encodings.
	DecodeContentEncodings []string `yaml:"decode_content_encodings"`
	// MaxStoredResponseBytes bounds a stored body; a larger response is
	// delivered to the first caller and stored without its body. Default
	// DefaultMaxStoredResponseBytes, 1 MiB.
	MaxStoredResponseBytes int64 `yaml:"max_stored_response_bytes"`
	// Fingerprint chooses what, besides method, route, path, query and
	// Content-Type, identifies a request. Default: the whole body.
	Fingerprint FingerprintConfig `yaml:"fingerprint"`
	// OnStoreError: FailClosed or FailOpen. Default DefaultOnStoreError,
	// fail_closed.
	OnStoreError StoreErrorPolicy `yaml:"on_store_error"`
	// OnAmbiguous: AmbiguousRelease or AmbiguousHold. Default
	// DefaultOnAmbiguous, release.
	OnAmbiguous AmbiguousPolicy `yaml:"on_ambiguous"`
	// ForwardKey: ForwardTenantScoped or ForwardAsSent, the key a handler
	// forwarding the request sends upstream (ForwardKeyPolicy.Key).
	// Default DefaultForwardKey, tenant_scoped.
	ForwardKey ForwardKeyPolicy `yaml:"forward_key"`
	// ReplayCache, when set, answers replays of recently completed records
	// from process memory. Routes may share one.
	ReplayCache *ReplayCache `yaml:"-"`

	// Tenant returns the tenant of a request. Default: "anonymous" for
	// every request, which is unsafe for multi-tenant use.
	Tenant func(*http.Request) string `yaml:"-"`
	// ErrorHandler writes refusals. Default DefaultErrorHandler.
	ErrorHandler func(http.ResponseWriter, *http.Request, error) `yaml:"-"`
	// Observe, when set, is called once per request that needs a key, with
	// the decision taken, and again with the stored outcome of an executed
	// request (Event.Stored set).
	Observe func(*http.Request, Event) `yaml:"-"`
	// Logger receives store failures. Default slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// FingerprintConfig chooses what a request's fingerprint covers besides
// its method, route, path, canonical query and Content-Type.
type FingerprintConfig struct {
	// Headers are request headers included, each a header name token.
	// Default none.
	Headers []string `yaml:"headers"`
	// JSONFields, when set, restrict a JSON body's part to these JSON
	// Pointers ("/order_id"). Default none: the whole body, canonical.
	JSONFields []string `yaml:"json_fields"`
	// HeadersIfPresent are request headers included only when the request
	// carries them: a request without any of them fingerprints as it did
	// before they were listed, so that adding one keeps the records
	// already stored replaying. Set in code (the gateway lists an enqueue
	// route's schedule headers). Default none.
	HeadersIfPresent []string `yaml:"-"`
}

// Defaults for Config.
const (
	DefaultKeySyntax    = KeyCompat
	DefaultMaxKeyLength = 255
	DefaultRetention    = 24 * time.Hour
	DefaultLease        = 30 * time.Second
	DefaultStoreTimeout = 2 * time.Second
	// DefaultCommitTimeout is DefaultLease/3: a commit may wait this long
	// and the default lease still has two renewal periods left, while a
	// standby that holds a commit longer is gone rather than slow, and
	// the client gets 503 with Retry-After instead of waiting on.
	DefaultCommitTimeout          = 10 * time.Second
	DefaultMaxRequestBytes        = 1 << 20
	DefaultMaxStoredResponseBytes = 1 << 20
	DefaultOnStoreError           = FailClosed
	DefaultOnAmbiguous            = AmbiguousRelease
	DefaultForwardKey             = ForwardTenantScoped
)

// The bounds of MaxKeyLength and Lease.
const (
	maxKeyLengthLimit = 4096
	minLease          = 100 * time.Millisecond
)

// DefaultMethods returns the methods that need a key when Config.Methods
// is nil: POST and PATCH.
func DefaultMethods() []string { return []string{http.MethodPost, http.MethodPatch} }

// AnonymousTenant is the tenant of every request when Config.Tenant is nil.
const AnonymousTenant = "anonymous"

// WithDefaults returns c with every setting left zero replaced by its
// default, as New and Validate read it; the functions (Tenant,
// ErrorHandler, Logger) are New's to fill. A configuration file's
// settings are read over these, so that a key written as zero means zero
// (see ValidateResolved).
func (c Config) WithDefaults() Config {
	if c.Methods == nil {
		c.Methods = DefaultMethods()
	}
	if c.KeySyntax == "" {
		c.KeySyntax = DefaultKeySyntax
	}
	if c.MaxKeyLength == 0 {
		c.MaxKeyLength = DefaultMaxKeyLength
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = DefaultCommitTimeout
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxStoredResponseBytes == 0 {
		c.MaxStoredResponseBytes = DefaultMaxStoredResponseBytes
	}
	if c.OnStoreError == "" {
		c.OnStoreError = DefaultOnStoreError
	}
	if c.OnAmbiguous == "" {
		c.OnAmbiguous = DefaultOnAmbiguous
	}
	if c.ForwardKey == "" {
		c.ForwardKey = DefaultForwardKey
	}
	c.Methods = slices.Clone(c.Methods)
	for i, m := range c.Methods {
		c.Methods[i] = strings.ToUpper(m)
	}
	return c
}

// withDefaults is WithDefaults with the functions' defaults too.
func (c Config) withDefaults() Config {
	c = c.WithDefaults()
	if c.Tenant == nil {
		c.Tenant = func(*http.Request) string { return AnonymousTenant }
	}
	if c.ErrorHandler == nil {
		c.ErrorHandler = DefaultErrorHandler
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// FieldError is one problem with one field of a Config. Validate and
// ValidateResolved return every one they find, joined with errors.Join.
type FieldError struct {
	// Field names the field by its yaml key, with the entry of a list:
	// "lease", "methods[1]", "fingerprint.json_fields[0]".
	Field string
	// With names the other field of a conflict between two, as for a
	// lease longer than the retention; "" otherwise.
	With string
	// Message says what is wrong, in one line.
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Validate reports every problem with c at once, each a *FieldError. A zero
// field stands for its default and is checked as that default.
func (c Config) Validate() error { return c.WithDefaults().ValidateResolved() }

// ValidateResolved is Validate for settings whose defaults are already
// filled in, such as those read from a configuration file, where a key
// left out takes its default and a key written means what it says: a zero
// field is checked as the value zero, not as its default.
func (c Config) ValidateResolved() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if c.Route == "" {
		bad("route", "required")
	}
	for i, m := range c.Methods {
		if !isToken(m) {
			bad(fmt.Sprintf("methods[%d]", i), "%q is not an HTTP method", m)
		}
	}
	switch c.KeySyntax {
	case KeyStrict, KeyCompat:
	default:
		bad("key_syntax", "%q is not strict or compat", c.KeySyntax)
	}
	if c.MaxKeyLength < 1 || c.MaxKeyLength > maxKeyLengthLimit {
		bad("max_key_length", "%d is outside 1..%d", c.MaxKeyLength, maxKeyLengthLimit)
	}
	if c.Retention <= 0 {
		bad("retention", "must be positive, not %s", c.Retention)
	}
	switch {
	case c.Lease <= 0:
		bad("lease", "must be positive, not %s", c.Lease)
	case c.Lease < minLease:
		bad("lease", "%s is shorter than the minimum %s", c.Lease, minLease)
	}
	// A record must outlive its claim.
	if c.Retention > 0 && c.Lease > c.Retention {
		errs = append(errs, &FieldError{Field: "lease", With: "retention",
			Message: fmt.Sprintf("%s is longer than retention %s", c.Lease, c.Retention)})
	}
	if c.StoreTimeout <= 0 {
		bad("store_timeout", "must be positive, not %s", c.StoreTimeout)
	}
	if c.CommitTimeout <= 0 {
		bad("commit_timeout", "must be positive, not %s", c.CommitTimeout)
	}
	if c.WaitInFlight < 0 {
		bad("wait_in_flight", "must not be negative, not %s", c.WaitInFlight)
	}
	if c.MaxRequestBytes <= 0 {
		bad("max_request_bytes", "must be positive, not %d", c.MaxRequestBytes)
	}
	if c.MaxStoredResponseBytes <= 0 {
		bad("max_stored_response_bytes", "must be positive, not %d", c.MaxStoredResponseBytes)
	}
	for i, e := range c.DecodeContentEncodings {
		if e != ContentEncodingGzip && e != ContentEncodingDeflate {
			bad(fmt.Sprintf("decode_content_encodings[%d]", i), "%q is not %s or %s", e, ContentEncodingGzip, ContentEncodingDeflate)
		}
	}
	for i, h := range c.Fingerprint.Headers {
		if !isToken(h) {
			bad(fmt.Sprintf("fingerprint.headers[%d]", i), "%q is not a header name", h)
		}
	}
	for i, h := range c.Fingerprint.HeadersIfPresent {
		if !isToken(h) {
			bad(fmt.Sprintf("fingerprint.headers_if_present[%d]", i), "%q is not a header name", h)
		}
	}
	for i, p := range c.Fingerprint.JSONFields {
		if _, err := parsePointer(p); err != nil {
			bad(fmt.Sprintf("fingerprint.json_fields[%d]", i), "%s", strings.TrimPrefix(err.Error(), "json_fields: "))
		}
	}
	switch c.OnStoreError {
	case FailClosed, FailOpen:
	default:
		bad("on_store_error", "%q is not fail_closed or fail_open", c.OnStoreError)
	}
	switch c.OnAmbiguous {
	case AmbiguousRelease, AmbiguousHold:
	default:
		bad("on_ambiguous", "%q is not release or hold", c.OnAmbiguous)
	}
	switch c.ForwardKey {
	case ForwardTenantScoped, ForwardAsSent:
	default:
		bad("forward_key", "%q is not tenant_scoped or as_sent", c.ForwardKey)
	}
	return errors.Join(errs...)
}

// standardMethod reports whether m is a method RFC 9110 or RFC 5789
// defines, spelt as they define it.
func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut,
		http.MethodDelete, http.MethodPost, http.MethodPatch, http.MethodConnect:
		return true
	}
	return false
}

// needsKey reports whether a request with this method must carry a key: a
// method Methods names, or any method that is not a standard one (a
// lower-case "post", an extension method), which nothing says is safe,
// unless Methods is empty: no method needs a key then.
func (c Config) needsKey(method string) bool {
	if slices.Contains(c.Methods, method) {
		return true
	}
	return len(c.Methods) > 0 && !standardMethod(method)
}

// isToken reports whether s is an RFC 9110 token, as a method and a header
// name are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
