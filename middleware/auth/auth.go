package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Mode selects how the tenant is found.
type Mode string

const (
	ModeAPIKey Mode = "api_key"
	ModeHeader Mode = "header"
	ModeNone   Mode = "none"
)

// Anonymous is the tenant of every request in ModeNone.
const Anonymous = "anonymous"

// ErrUnauthorized: missing or bad credentials.
var ErrUnauthorized = errors.New("unauthorized")

// TenantKeys is one tenant and the hex SHA-256 digests of its API keys.
type TenantKeys struct {
	Name          string
	APIKeySHA256s []string
}

// Config configures an Authenticator.
type Config struct {
	Mode Mode
	// Header carries the credentials: "Bearer <key>" in api_key mode, the
	// tenant name in header mode. Default Authorization.
	Header  string
	Tenants []TenantKeys
}

type digest struct {
	tenant string
	sum    [sha256.Size]byte
}

// Authenticator resolves tenants.
type Authenticator struct {
	mode    Mode
	header  string
	digests []digest
	known   map[string]bool
}

// New validates cfg.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{mode: cfg.Mode, header: cfg.Header, known: map[string]bool{}}
	if a.header == "" {
		a.header = "Authorization"
	}
	switch a.mode {
	case ModeAPIKey, ModeHeader, ModeNone:
	default:
		return nil, fmt.Errorf("auth: mode %q is not api_key, header or none", cfg.Mode)
	}
	for _, t := range cfg.Tenants {
		a.known[t.Name] = true
		for _, h := range t.APIKeySHA256s {
			b, err := hex.DecodeString(h)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("auth: tenant %s: api_key_sha256 %q is not a hex SHA-256", t.Name, h)
			}
			d := digest{tenant: t.Name}
			copy(d.sum[:], b)
			a.digests = append(a.digests, d)
		}
	}
	return a, nil
}

// Header is the header the authenticator reads (so a proxy can strip it).
func (a *Authenticator) Header() string { return a.header }

// Mode is the configured mode.
func (a *Authenticator) Mode() Mode { return a.mode }

// Authenticate returns the request's tenant or ErrUnauthorized. The
// credentials header must come once: with two lines, which one a proxy in
// front checked and which one an upstream reads is anyone's guess.
func (a *Authenticator) Authenticate(r *http.Request) (string, error) {
	if a.mode == ModeNone {
		return Anonymous, nil
	}
	if len(r.Header.Values(a.header)) > 1 {
		return "", ErrUnauthorized
	}
	switch a.mode {
	case ModeHeader:
		name := strings.TrimSpace(r.Header.Get(a.header))
		if !ValidTenant(name) || (len(a.known) > 0 && !a.known[name]) {
			return "", ErrUnauthorized
		}
		return name, nil
	}
	v := r.Header.Get(a.header)
	scheme, key, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return "", ErrUnauthorized
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(key)))
	tenant := ""
	// Compare against every digest so timing says nothing about which
	// tenant, if any, matched.
	for _, d := range a.digests {
		if subtle.ConstantTimeCompare(sum[:], d.sum[:]) == 1 {
			tenant = d.tenant
		}
	}
	if tenant == "" {
		return "", ErrUnauthorized
	}
	return tenant, nil
}

// ValidTenant reports whether name can be a tenant: 1 to 128 of a-z, A-Z,
// 0-9, '_', '.' and '-'. A tenant scopes idempotency records, business
// keys, locks and fences; those are named "<tenant>/<resource>", so a
// name with a "/" (or any other separator) could pose as another tenant's
// scope. In header mode the proxy in front names the tenant, and a name
// outside this set is refused like a missing one.
func ValidTenant(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// ContextKey is the context key Tenant reads; its value is the tenant, a
// string. WithTenant stores it with context.WithValue; a server that keeps
// the state of a request in one context value of its own answers this key
// in its Value method instead.
type ContextKey struct{}

// Middleware authenticates every request; a failure goes to onError with
// ErrUnauthorized and the request stops there.
func (a *Authenticator) Middleware(onError func(http.ResponseWriter, *http.Request, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tenant, err := a.Authenticate(r)
			if err != nil {
				onError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithTenant(r.Context(), tenant)))
		})
	}
}

// WithTenant returns ctx carrying tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, ContextKey{}, tenant)
}

// Tenant returns the authenticated tenant, or "" outside the middleware.
func Tenant(ctx context.Context) string {
	t, _ := ctx.Value(ContextKey{}).(string)
	return t
}
