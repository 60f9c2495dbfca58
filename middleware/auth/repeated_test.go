package auth_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/middleware/auth"
)

// TestRepeatedCredentialsHeader: two lines of the credentials header are
// refused, even when one of them is valid — the first line winning is
// what let a second one through to whoever reads the last.
func TestRepeatedCredentialsHeader(t *testing.T) {
	t.Parallel()
	tenants := []auth.TenantKeys{{Name: "acme", APIKeySHA256s: []string{sum("acme-key")}}, {Name: "globex"}}
	apiKey, _ := auth.New(auth.Config{Mode: auth.ModeAPIKey, Tenants: tenants})
	header, _ := auth.New(auth.Config{Mode: auth.ModeHeader, Header: "X-Tenant", Tenants: tenants})
	for _, tc := range []struct {
		name   string
		a      *auth.Authenticator
		header string
		values []string
	}{
		{"api key twice", apiKey, "Authorization", []string{"Bearer acme-key", "Bearer acme-key"}},
		{"api key then another", apiKey, "Authorization", []string{"Bearer acme-key", "Bearer nope"}},
		{"tenant header twice", header, "X-Tenant", []string{"acme", "globex"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/", nil)
			for _, v := range tc.values {
				r.Header.Add(tc.header, v)
			}
			if got, err := tc.a.Authenticate(r); !errors.Is(err, auth.ErrUnauthorized) {
				t.Fatalf("Authenticate = %q, %v; want ErrUnauthorized", got, err)
			}
			r.Header.Del(tc.header)
			r.Header.Set(tc.header, tc.values[0])
			if _, err := tc.a.Authenticate(r); err != nil {
				t.Fatalf("the first line alone: %v", err)
			}
		})
	}
}
