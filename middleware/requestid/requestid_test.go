package requestid_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/middleware/requestid"
)

func TestMiddleware(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, sent string
		keep       bool
	}{
		{"generated when absent", "", false},
		{"client id kept", "req-42.a:b_c", true},
		{"hostile id replaced", "a\r\nInjected: 1", false},
		{"overlong id replaced", strings.Repeat("a", 129), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen string
			h := requestid.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = requestid.FromContext(r.Context())
			}))
			r := httptest.NewRequest("GET", "/", nil)
			if tc.sent != "" {
				r.Header[requestid.Header] = []string{tc.sent}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			got := w.Header().Get(requestid.Header)
			if got == "" || got != seen {
				t.Fatalf("response id %q, context id %q", got, seen)
			}
			if (got == tc.sent) != tc.keep {
				t.Fatalf("id %q for sent %q, keep=%v", got, tc.sent, tc.keep)
			}
		})
	}
}
