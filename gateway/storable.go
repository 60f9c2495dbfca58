package gateway

import (
	"net/http"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/problem"
)

// storableScope answers 404 for an admin record path whose tenant, route
// or key no record can have (job.Storable): such a path names nothing the
// gateway keeps, and must be answered 404 before a query fails on it — a
// database error would be a 503, which invites retries.
func (g *Gateway) storableScope(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := scopeOf(r)
		if !job.Storable(s.Tenant) || !job.Storable(s.Route) || !job.Storable(s.Key) {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no idempotency record for this tenant, route and key"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
