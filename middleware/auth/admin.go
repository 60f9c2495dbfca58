package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// AdminToken reports whether r carries the operator's admin token: as a
// bearer token, or as the password of HTTP Basic authentication (any user
// name) so that a browser can reach an admin page. want is the token's
// SHA-256, compared in constant time. A zero want refuses every request,
// and so does a request with more than one Authorization line.
func AdminToken(r *http.Request, want [sha256.Size]byte) bool {
	lines := r.Header.Values("Authorization")
	if want == ([sha256.Size]byte{}) || len(lines) != 1 {
		return false
	}
	token, ok := "", false
	if _, password, basic := r.BasicAuth(); basic {
		token, ok = password, true
	} else if scheme, bearer, _ := strings.Cut(lines[0], " "); strings.EqualFold(scheme, "Bearer") {
		token, ok = strings.TrimSpace(bearer), true
	}
	sum := sha256.Sum256([]byte(token))
	return ok && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}
