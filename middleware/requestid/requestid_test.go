package requestid_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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

func TestNewIsUUIDv7(t *testing.T) {
	t.Parallel()
	before := time.Now().UnixMilli()
	a, b := requestid.New(), requestid.New()
	after := time.Now().UnixMilli()
	if a == b {
		t.Fatalf("two ids %q are the same", a)
	}
	for _, id := range []string{a, b} {
		if !uuidForm.MatchString(id) || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("id %q is not a lower-case UUIDv7", id)
		}
		ms, err := strconv.ParseInt(strings.ReplaceAll(id[:13], "-", ""), 16, 64)
		if err != nil || ms < before || ms > after {
			t.Fatalf("id %q carries the time %d, want it in [%d, %d]", id, ms, before, after)
		}
		if got := requestid.URN(id); got != "urn:uuid:"+id {
			t.Fatalf("URN(%q) = %q, want the id itself", id, got)
		}
	}
}

var uuidForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestURN(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, id, want string }{
		{"a UUID is its own URN", "0193a8c4-7b1e-7c3d-9f00-1a2b3c4d5e6f", "urn:uuid:0193a8c4-7b1e-7c3d-9f00-1a2b3c4d5e6f"},
		{"in lower case", "0193A8C4-7B1E-7C3D-9F00-1A2B3C4D5E6F", "urn:uuid:0193a8c4-7b1e-7c3d-9f00-1a2b3c4d5e6f"},
		// UUIDv5 in the name space 06d654e8-62ff-58c4-a765-bdfb3bbe6edf,
		// as any RFC 9562 implementation derives it.
		{"another id, name-based", "req-1", "urn:uuid:c5cc59ef-6d2f-50b2-9b2a-3283dd65c6e9"},
		{"32 hex digits are not a UUID", "2f7474cb84e179fa6788a9881fb00f89", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := requestid.URN(tc.id)
			if got != requestid.URN(tc.id) {
				t.Fatalf("URN(%q) differs from one call to the next", tc.id)
			}
			rest, ok := strings.CutPrefix(got, "urn:uuid:")
			if !ok || !uuidForm.MatchString(rest) {
				t.Fatalf("URN(%q) = %q, not a urn:uuid:", tc.id, got)
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("URN(%q) = %q, want %q", tc.id, got, tc.want)
			}
			if tc.want == "" && rest[14] != '5' {
				t.Fatalf("URN(%q) = %q, want a UUIDv5", tc.id, got)
			}
		})
	}
	if a, b := requestid.URN(""), requestid.URN(""); a == b {
		t.Fatalf("URN of no id is %q twice; want a fresh one each time", a)
	}
}
