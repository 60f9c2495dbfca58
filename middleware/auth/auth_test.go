package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/middleware/auth"
)

func sum(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	tenants := []auth.TenantKeys{
		{Name: "acme", APIKeySHA256s: []string{sum("acme-key-1"), sum("acme-key-2")}},
		{Name: "globex", APIKeySHA256s: []string{sum("globex-key")}},
	}
	apiKey, err := auth.New(auth.Config{Mode: auth.ModeAPIKey, Tenants: tenants})
	if err != nil {
		t.Fatal(err)
	}
	header, _ := auth.New(auth.Config{Mode: auth.ModeHeader, Header: "X-Tenant", Tenants: tenants})
	none, _ := auth.New(auth.Config{Mode: auth.ModeNone})
	// No tenant list: the proxy in front is trusted to name any tenant,
	// but not one that could pose as another's scope.
	open, _ := auth.New(auth.Config{Mode: auth.ModeHeader, Header: "X-Tenant"})
	tests := []struct {
		name         string
		a            *auth.Authenticator
		hdr, val     string
		tenant       string
		unauthorized bool
	}{
		{"first key", apiKey, "Authorization", "Bearer acme-key-1", "acme", false},
		{"second key", apiKey, "Authorization", "Bearer acme-key-2", "acme", false},
		{"scheme case", apiKey, "Authorization", "bearer globex-key", "globex", false},
		{"wrong key", apiKey, "Authorization", "Bearer nope", "", true},
		{"no header", apiKey, "", "", "", true},
		{"basic scheme", apiKey, "Authorization", "Basic YWNtZTp4", "", true},
		{"bearer without key", apiKey, "Authorization", "Bearer ", "", true},
		{"header mode known", header, "X-Tenant", "globex", "globex", false},
		{"header mode unknown", header, "X-Tenant", "initech", "", true},
		{"header mode empty", header, "", "", "", true},
		{"header mode open", open, "X-Tenant", "initech", "initech", false},
		{"header mode slash", open, "X-Tenant", "acme/order:1", "", true},
		{"header mode space", open, "X-Tenant", "ac me", "", true},
		{"header mode too long", open, "X-Tenant", strings.Repeat("a", 129), "", true},
		{"none", none, "", "", auth.Anonymous, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/", nil)
			if tc.hdr != "" {
				r.Header.Set(tc.hdr, tc.val)
			}
			got, err := tc.a.Authenticate(r)
			if tc.unauthorized != errors.Is(err, auth.ErrUnauthorized) || got != tc.tenant {
				t.Fatalf("Authenticate = %q, %v; want %q unauthorized=%v", got, err, tc.tenant, tc.unauthorized)
			}
		})
	}
	if _, err := auth.New(auth.Config{Mode: auth.ModeAPIKey, Tenants: []auth.TenantKeys{{Name: "x", APIKeySHA256s: []string{"abc"}}}}); err == nil {
		t.Fatal("a digest that is not 64 hex characters was accepted")
	}
}
