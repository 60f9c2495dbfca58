// Package requestid gives every request an id: the client's X-Request-Id
// when it sent a sane one, a new random id otherwise. The id is echoed in
// the response header and readable with FromContext, so logs and problem
// bodies can name it.
//
//	handler = requestid.Middleware(handler)
//	id := requestid.FromContext(r.Context())
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// Header is the request and response header carrying the id.
const Header = "X-Request-Id"

type ctxKey struct{}

// Middleware sets the request id on the context and the response.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(Header)
		if !valid(id) {
			id = New()
			r.Header.Set(Header, id)
		}
		w.Header().Set(Header, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, id)))
	})
}

// FromContext returns the request id, or "" outside the middleware.
func FromContext(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// New returns a random 128-bit id in hex.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// valid accepts ids a client may choose: 1..128 characters of letters,
// digits and -_.:, so a hostile id cannot forge log lines or headers.
func valid(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}
