package auth_test

import (
	"crypto/sha256"
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/middleware/auth"
)

func TestAdminToken(t *testing.T) {
	want := sha256.Sum256([]byte("s3cret"))
	for _, tc := range []struct {
		name  string
		lines []string
		ok    bool
	}{
		{"bearer", []string{"Bearer s3cret"}, true},
		{"bearer, any case", []string{"bearer s3cret"}, true},
		{"basic password", []string{"Basic b3A6czNjcmV0"}, true}, // op:s3cret
		{"wrong token", []string{"Bearer nope"}, false},
		{"no credentials", nil, false},
		{"another scheme", []string{"Token s3cret"}, false},
		{"two lines", []string{"Bearer s3cret", "Bearer s3cret"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			for _, l := range tc.lines {
				r.Header.Add("Authorization", l)
			}
			if got := auth.AdminToken(r, want); got != tc.ok {
				t.Fatalf("AdminToken = %v, want %v", got, tc.ok)
			}
		})
	}
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.Header.Set("Authorization", "Bearer ")
	if auth.AdminToken(r, [sha256.Size]byte{}) {
		t.Fatal("an unset admin token let a request through")
	}
}
