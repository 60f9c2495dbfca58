package gateway

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// storable reports whether s can be a PostgreSQL text value: UTF-8
// without U+0000. A path segment that is not (GET /v1/jobs/%00) names
// nothing the gateway keeps, and must be answered 404 before a query
// fails on it — a database error would be a 503, which invites retries.
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// storableScope answers 404 for an admin record path whose tenant, route
// or key no record can have.
func (g *Gateway) storableScope(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := scopeOf(r)
		if !storable(s.Tenant) || !storable(s.Route) || !storable(s.Key) {
			g.problems.Write(w, r, &idempotency.RequestError{Err: ErrNotFound, Detail: "no idempotency record for this tenant, route and key"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
